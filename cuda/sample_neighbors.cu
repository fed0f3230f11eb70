// The neighbor sampler's random draw: for every row i, k distinct offsets in [0, deg[i]),
// every k-subset equally likely, written in ascending order to out[i*k .. i*k+k). One thread
// per row, grid-stride loop.
//
// Selection is Floyd's algorithm: step s (0-based) draws t uniform in [0, j], j = deg - k + s,
// and takes t, or j when t was taken before. The picks are kept sorted in a per-thread array: a
// linear scan finds t's place (or t itself), and j, larger than every earlier pick, goes last,
// so no separate sort is needed. O(k^2) per row.
//
// Randomness is counter-based (no state survives a launch): row i of a launch with key K uses
// the SplitMix64 sequence seeded with mix(K ^ mix(i)), draw s being mix(seed + (s+1) * GAMMA).
// Distinct (K, i) give distinct seeds (mix is a bijection); two rows' sequences overlap only if
// their seeds differ by fewer than k steps of GAMMA. The key is read from device memory
// (key[0]) so that the host can draw it from its generator without synchronising. A 64-bit
// draw x becomes the high word of x * n, floor(x * n / 2^64), in [0, n): each value has
// probability within 2^-64 of 1/n (a relative bias below n / 2^64).
//
// Rows with deg[i] <= k take all their offsets 0 .. deg[i]-1, then -1 fills the row. A launch
// with k outside [1, CAP] writes nothing.
//
// Entry points (extern "C"): ibp_sample_neighbors_k{32,256}, CAP = the suffix, the size of the
// per-thread array of picks (local memory), so the smaller one is for the common fanouts.
// Blocks have at most IBP_SAMPLE_THREADS threads (`__launch_bounds__`).

typedef unsigned long long u64;
typedef long long i64;

#define IBP_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull
#define IBP_SAMPLE_THREADS 256

// The SplitMix64 output function (a bijection of 64-bit words).
__device__ __forceinline__ u64 splitmix64_mix(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

template <int CAP>
__device__ void sample_neighbors(const i64* __restrict__ deg, const i64* __restrict__ key,
                                 i64* __restrict__ out, i64 rows, int k) {
    if (k < 1 || k > CAP) return;
    const u64 base = (u64)key[0];
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < rows; i += stride) {
        const i64 n = deg[i];
        i64* dst = out + i * k;
        if (n <= k) {
            for (int s = 0; s < k; ++s) dst[s] = s < n ? (i64)s : (i64)-1;
            continue;
        }
        i64 picked[CAP];
        u64 state = splitmix64_mix(base ^ splitmix64_mix((u64)i));
        for (int s = 0; s < k; ++s) {
            const i64 j = n - k + s;
            state += IBP_SPLITMIX_GAMMA;
            const i64 t = (i64)__umul64hi(splitmix64_mix(state), (u64)j + 1ull);
            int p = 0;
            while (p < s && picked[p] < t) ++p;
            if (p < s && picked[p] == t) {
                picked[s] = j;
                continue;
            }
            for (int q = s; q > p; --q) picked[q] = picked[q - 1];
            picked[p] = t;
        }
        for (int s = 0; s < k; ++s) dst[s] = picked[s];
    }
}

#define IBP_SAMPLE_NEIGHBORS(NAME, CAP)                                                      \
    extern "C" __global__ void __launch_bounds__(IBP_SAMPLE_THREADS)                         \
        NAME(const i64* __restrict__ deg, const i64* __restrict__ key, i64* __restrict__ out, \
             i64 rows, int k) {                                                              \
        sample_neighbors<CAP>(deg, key, out, rows, k);                                       \
    }

IBP_SAMPLE_NEIGHBORS(ibp_sample_neighbors_k32, 32)
IBP_SAMPLE_NEIGHBORS(ibp_sample_neighbors_k256, 256)
