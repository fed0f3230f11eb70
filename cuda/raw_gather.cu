// Raw zero-copy gather: out[p] = table[idx[r]] with p = out_pos ? out_pos[r] : r, for rows
// of `row_bytes` bytes, one warp per row, lanes moving VEC-byte vectors (the host picks the
// widest VEC that divides row_bytes and the pointers' alignment). The table may live in
// pinned host memory (read over UVA) or in device memory. `out_pos` (a permutation of
// 0..n-1, not checked here) lets the host pass the ids sorted, so rows are read in address
// order, and still write each row at its caller's position. Out-of-range ids are never read:
// their output row is zero-filled and error[0] gets 1 + the smallest p holding one (the
// caller's position).
//
// Rows whose width is a multiple of 4 but not of 16 start anywhere in a 16-byte chunk, and
// lanes moving 4- or 8-byte vectors then straddle 128-byte lines. `ibp_raw_gather_lines`
// instead loads whole aligned 16-byte chunks (each warp load covers four full lines) and
// stores the row's 4-byte words; it reads up to 15 bytes past a row (the table must be
// readable 16 bytes past its end, as the pinned buffers are) and needs a 16-byte-aligned
// table and a 4-byte-aligned output.
//
// Blocks have at most IBP_GATHER_THREADS threads (`__launch_bounds__`).
//
// Entry points (extern "C"): ibp_raw_gather_v{16,8,4,2,1}, ibp_raw_gather_lines.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// Most threads per block (32 warps), and one such block fits an SM: at most 64 registers a
// thread, as blocks of the default 8 warps with 4 to an SM.
#define IBP_GATHER_THREADS 1024
#define IBP_GATHER_MIN_BLOCKS 1

#ifndef IBP_RECORD_FIRST_DEFINED
#define IBP_RECORD_FIRST_DEFINED
// Keep in `*slot` the smallest 1 + r reported by any thread (0 means none reported).
__device__ __forceinline__ void record_first(int* slot, i64 r) {
    const int v = (int)min(r + 1, (i64)0x7fffffff);
    int old = atomicCAS(slot, 0, v);
    while (old != 0 && old > v) {
        const int seen = atomicCAS(slot, old, v);
        if (seen == old) break;
        old = seen;
    }
}
#endif

template <typename V>
__device__ void raw_gather(const u8* __restrict__ table, const i64* __restrict__ idx,
                           const i64* __restrict__ out_pos, u8* __restrict__ out,
                           int* __restrict__ error, i64 n, i64 num_rows, i64 row_bytes) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const i64 per_row = row_bytes / (i64)sizeof(V);
    for (i64 r = (i64)blockIdx.x * warps + warp; r < n; r += (i64)gridDim.x * warps) {
        const i64 row = idx[r];
        const i64 p = out_pos ? out_pos[r] : r;
        V* dst = reinterpret_cast<V*>(out + p * row_bytes);
        if (row < 0 || row >= num_rows) {
            if (lane == 0) record_first(&error[0], p);
            const V zero{};
            for (i64 q = lane; q < per_row; q += 32) dst[q] = zero;
            continue;
        }
        const V* src = reinterpret_cast<const V*>(table + row * row_bytes);
        for (i64 q = lane; q < per_row; q += 32) dst[q] = src[q];
    }
}

__device__ __forceinline__ void store_if(u32* dst, i64 k, i64 words, u32 v) {
    if (k >= 0 && k < words) dst[k] = v;
}

__device__ void raw_gather_lines(const u8* __restrict__ table, const i64* __restrict__ idx,
                                 const i64* __restrict__ out_pos, u8* __restrict__ out,
                                 int* __restrict__ error, i64 n, i64 num_rows, i64 row_bytes) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const i64 words = row_bytes >> 2;
    for (i64 r = (i64)blockIdx.x * warps + warp; r < n; r += (i64)gridDim.x * warps) {
        const i64 row = idx[r];
        const i64 p = out_pos ? out_pos[r] : r;
        u32* dst = reinterpret_cast<u32*>(out + p * row_bytes);
        if (row < 0 || row >= num_rows) {
            if (lane == 0) record_first(&error[0], p);
            for (i64 q = lane; q < words; q += 32) dst[q] = 0u;
            continue;
        }
        const u64 start = (u64)row * (u64)row_bytes;
        const u64 first = start & ~15ull;
        const i64 skip = (i64)((start - first) >> 2);  // words of the chunk before the row
        const i64 chunks = (skip + words + 3) >> 2;
        const uint4* src = reinterpret_cast<const uint4*>(table + first);
        for (i64 q = lane; q < chunks; q += 32) {
            const uint4 v = src[q];
            const i64 k = 4 * q - skip;  // the output word of v.x
            store_if(dst, k, words, v.x);
            store_if(dst, k + 1, words, v.y);
            store_if(dst, k + 2, words, v.z);
            store_if(dst, k + 3, words, v.w);
        }
    }
}

#define IBP_RAW_GATHER(NAME, V)                                                                \
    extern "C" __global__ void __launch_bounds__(IBP_GATHER_THREADS, IBP_GATHER_MIN_BLOCKS)    \
        NAME(const u8* __restrict__ table, const i64* __restrict__ idx,                       \
             const i64* __restrict__ out_pos, u8* __restrict__ out, int* __restrict__ error,  \
             i64 n, i64 num_rows, i64 row_bytes) {                                            \
        raw_gather<V>(table, idx, out_pos, out, error, n, num_rows, row_bytes);                \
    }

IBP_RAW_GATHER(ibp_raw_gather_v16, uint4)
IBP_RAW_GATHER(ibp_raw_gather_v8, uint2)
IBP_RAW_GATHER(ibp_raw_gather_v4, unsigned int)
IBP_RAW_GATHER(ibp_raw_gather_v2, u16)
IBP_RAW_GATHER(ibp_raw_gather_v1, u8)

extern "C" __global__ void __launch_bounds__(IBP_GATHER_THREADS, IBP_GATHER_MIN_BLOCKS)
    ibp_raw_gather_lines(const u8* __restrict__ table, const i64* __restrict__ idx,
                         const i64* __restrict__ out_pos, u8* __restrict__ out,
                         int* __restrict__ error, i64 n, i64 num_rows, i64 row_bytes) {
    raw_gather_lines(table, idx, out_pos, out, error, n, num_rows, row_bytes);
}
