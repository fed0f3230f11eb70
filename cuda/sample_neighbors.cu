// The neighbor sampler's random draw: for every row i, k distinct offsets in [0, deg[i]),
// every k-subset equally likely, written in ascending order to out[i*k .. i*k+k). One thread
// per row, grid-stride loop.
//
// Selection is Floyd's algorithm: step s (0-based) draws t uniform in [0, j], j = deg - k + s,
// and takes t, or j when t was taken before. The picks are kept sorted in a per-thread array: a
// linear scan finds t's place (or t itself), and j, larger than every earlier pick, goes last,
// so no separate sort is needed. O(k^2) per row. With replacement (the hop kernels below), the k
// draws are independent, t uniform in [0, deg), insertion-sorted.
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
// Entry points (extern "C"): ibp_sample_neighbors_k{32,256}, CAP = the suffix, the largest k
// the entry point draws. Where the picks are kept while they are drawn: for CAP <= 32 (the
// common fanouts) in a per-thread array of CAP words (local memory); above, in the row's own k
// output slots, so that no launch makes the driver reserve CAP * 8 bytes of local memory for
// every thread the GPU can hold (2 KiB x 2,048 threads x 132 SMs is 528 MiB on an H100); and
// the hop kernels at the end of this file (ibp_hop_draw_k{32,256}_{i32,i64,pairs},
// ibp_hop_all_{i32,i64,pairs}, ibp_hop_flags, ibp_hop_emit, ibp_hop_clear, ibp_hop_pack;
// i32/i64: the CSR index width; pairs: 64-bit indices, each with its edge id, `IndexEdge`).
// Blocks have at most IBP_SAMPLE_THREADS threads (`__launch_bounds__`).

typedef unsigned long long u64;
typedef long long i64;

#define IBP_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull
#define IBP_SAMPLE_THREADS 256
// The largest CAP whose picks live in a per-thread array (see above).
#define IBP_LOCAL_PICKS 32

// The SplitMix64 output function (a bijection of 64-bit words).
__device__ __forceinline__ u64 splitmix64_mix(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Row `i`'s random stream under launch key `base`: draw s (0-based) is mix(seed + (s+1) * GAMMA).
__device__ __forceinline__ u64 row_seed(u64 base, i64 i) {
    return splitmix64_mix(base ^ splitmix64_mix((u64)i));
}

// `k` distinct offsets in [0, n) (n > k, k <= CAP) by Floyd's algorithm, ascending in picked[].
template <int CAP>
__device__ __forceinline__ void draw_distinct(u64 base, i64 i, i64 n, int k, i64* picked) {
    u64 state = row_seed(base, i);
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
}

// `k` independent uniform offsets in [0, n) (n >= 1, k <= CAP), ascending in picked[] (repeats
// adjacent).
template <int CAP>
__device__ __forceinline__ void draw_replace(u64 base, i64 i, i64 n, int k, i64* picked) {
    u64 state = row_seed(base, i);
    for (int s = 0; s < k; ++s) {
        state += IBP_SPLITMIX_GAMMA;
        const i64 t = (i64)__umul64hi(splitmix64_mix(state), (u64)n);
        int p = s;
        while (p > 0 && picked[p - 1] > t) {
            picked[p] = picked[p - 1];
            --p;
        }
        picked[p] = t;
    }
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
        i64 scratch[CAP <= IBP_LOCAL_PICKS ? CAP : 1];
        i64* picked = CAP <= IBP_LOCAL_PICKS ? scratch : dst;
        draw_distinct<CAP>(base, i, n, k, picked);
        if (CAP <= IBP_LOCAL_PICKS) {
            for (int s = 0; s < k; ++s) dst[s] = picked[s];
        }
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


// ---------------------------------------------------------------------------------------------
// One sampling hop in three launches (ibp_graph/sample_hop.py drives them)
// ---------------------------------------------------------------------------------------------
//
// The hop expands `rows` frontier nodes (global ids `frontier[i]`, local ids `begin + i`) into
// slots: slot e holds one sampled in-neighbor, its global id `nbr[e]` and CSR position
// `pos[e]` (with pairs, its edge id), or -1 in both (an unused slot). Two layouts:
//   - fanout k > 0 (`ibp_hop_draw_*`): row i owns slots i*k .. i*k+k-1. A row with at most k
//     in-neighbors (and replace == 0) takes all of them, in CSR order, then -1s; otherwise the
//     draw above (distinct, or with replacement when `replace` != 0), offsets ascending.
//     Rows with no in-neighbor take nothing, also with replacement. With `rows_at` set, only
//     the first min(rows_at[0], rows) rows are expanded and the slots of the others are unused:
//     the frontier's size is then a count on the device (written by the last hop's emit), and
//     `rows` the bound the host sized the buffers for;
//   - all in-neighbors (`ibp_hop_all_*`): row i owns slots slot_start[i] .. slot_start[i+1]-1
//     (an exclusive prefix sum of the degrees, rows + 1 entries), in CSR order; no slot is unused.
//
// Local ids live in the sampler's dense map (ibp_graph/sample_index.py): `local[v]` is
// UNSEEN (INT64_MAX) for a node not in the batch and `id - IBP_KNOWN` (negative) for a node with local
// id `id`. Every used slot e does atomicMin(&local[nbr[e]], e): afterwards a node that was
// unseen holds the first slot that reached it, and a known node keeps its negative entry.
//
// `ibp_hop_flags` then marks slot e fresh (the first slot of a node new to the batch) and used,
// both in one int64 flags[e] (below); the driver takes their inclusive prefix sum (`cum`), whose
// last word holds the two totals. `ibp_hop_emit` writes, for used slot e, at position
// used(cum[e]) - 1 of the hop's edges: row = the neighbor's local id (a fresh node numbered
// `end + fresh(cum[v]) - 1` after its first slot v, so in order of first occurrence), col = its
// target's local id, edge = edge_ids[pos[e]] (pos[e] itself where edge_ids is null: the
// edge id a pairs hop left there); a fresh slot also appends its node to `fresh`
// and enters it in the map. A node's entry is read by several threads while its first slot
// rewrites it; both values (its first slot, or its final id) give the same local id.
//
// Sizes on the device: with `counts` set, emit of hop `hop` (1-based, of `hops`) stores the
// hop's totals, the new nodes at counts[hop] and the edges at counts[hops + hop] (counts[0]
// holds the seeds), so that the next hop (`rows_at`) and the host's one read at the end of the
// batch find them; with `begin` < 0 it also takes `end` = counts[0] + ... + counts[hop - 1]
// and `begin` = end - counts[hop - 1] from there (the hop's frontier: the nodes the last hop
// added).
//
// `ibp_hop_clear` sets the map's entries of the first counts[at] nodes of a node buffer (the
// seeds, at 0, or hop `at`'s new nodes) back to UNSEEN, the count read on the device: a batch
// of a group leaves the map empty for the next one before the host knows its sizes
// (ibp_graph/sample_hop.py, `clear_launched`).
//
// `ibp_hop_pack` copies the counted entries of `n_parts` buffers into `out`, one after the
// other, the counts read on the device. Part p is four words of `parts`: its address, its
// capacity (entries a row), where its count is in `counts` (the count is taken at most up to
// the capacity) and the distance between its rows. A part has `rows` rows (a batch's nodes:
// 1; a hop's edges: 3, the row, col and edge ids) and `out` has `rows` rows of `width`
// entries, the sum of the counts; each part's entries follow those of the parts before it: a
// group's nodes, or its edges, in one tensor, in the order the host cuts them into batches
// (ibp_graph/sample_hop.py, `finish_group`).

#define IBP_KNOWN (1ll << 62)
#define IBP_UNSEEN 0x7fffffffffffffffll
// A slot's flags in one word, so that one device-wide scan counts both: used in the low 32
// bits, fresh in the high ones (a hop has fewer than 2^31 slots, so the low half never carries
// and the signed 64-bit sum never overflows).
#define IBP_FRESH_ONE (1ll << 32)
#define IBP_USED_MASK 0xffffffffll
// Slots a lane of ibp_hop_draw_* claims at once (below).
#define IBP_CLAIM_LOADS 4

#ifndef IBP_RELAXED_DEFINED
// The map entries that ibp_hop_emit reads while another thread may rewrite them: volatile
// 8-byte accesses, each one whole (never torn) and never kept in a register. (The host
// harness, tests/simt/simt_host.h, defines them as relaxed atomics.)
__device__ __forceinline__ long long relaxed_load(const long long* p) {
    return *(const volatile long long*)p;
}
__device__ __forceinline__ void relaxed_store(long long* p, long long v) {
    *(volatile long long*)p = v;
}
#endif

// Row of slot `e`: e / k in the fixed layout (k > 0), else the last i with slot_start[i] <= e.
__device__ __forceinline__ i64 slot_row(i64 e, int k, const i64* __restrict__ slot_start,
                                        i64 rows) {
    if (k > 0) return e / k;
    i64 lo = 0, hi = rows;  // slot_start[lo] <= e < slot_start[hi]
    while (hi - lo > 1) {
        const i64 mid = lo + ((hi - lo) >> 1);
        if (slot_start[mid] <= e) lo = mid;
        else hi = mid;
    }
    return lo;
}

// An entry of a graph's CSR as the hop kernels read it: an in-neighbor (`int` or `i64`
// indices), or an in-neighbor with its edge id, the two in one 16-byte word (`IndexEdge`:
// CSRGraph's pairs layout, ibp_graph/graph.py), so that one load, one sector, reads both.
struct __align__(16) IndexEdge {
    i64 index;
    i64 edge;
};

__device__ __forceinline__ i64 entry_index(int x) { return x; }
__device__ __forceinline__ i64 entry_index(i64 x) { return x; }
__device__ __forceinline__ i64 entry_index(IndexEdge x) { return x.index; }

// An unused slot's entry (in-neighbor -1).
template <typename I>
__device__ __forceinline__ I no_entry() {
    return I(-1);
}
template <>
__device__ __forceinline__ IndexEdge no_entry<IndexEdge>() {
    return IndexEdge{-1, -1};
}

// A claimed slot's `pos`: its CSR position `p`, or with pairs its edge id (so that
// ibp_hop_emit, given no edge_ids, reads none).
__device__ __forceinline__ i64 slot_pos(int, i64 p) { return p; }
__device__ __forceinline__ i64 slot_pos(i64, i64 p) { return p; }
__device__ __forceinline__ i64 slot_pos(IndexEdge x, i64) { return x.edge; }

// Slot `e` takes the in-neighbor of `entry` (read at CSR position `p`): its id to nbr[e],
// its position or edge id to pos[e], and the dense map's claim.
template <typename I>
__device__ __forceinline__ void claim_slot(I entry, i64 p, i64 e, long long* local,
                                           i64* __restrict__ nbr, i64* __restrict__ pos) {
    const i64 v = entry_index(entry);
    nbr[e] = v;
    pos[e] = slot_pos(entry, p);
    atomicMin(local + v, (long long)e);
}

template <int CAP, typename I>
__device__ void hop_draw(const i64* __restrict__ indptr, const I* __restrict__ indices,
                         const i64* __restrict__ frontier, const i64* __restrict__ rows_at,
                         const i64* __restrict__ key, long long* local, i64* __restrict__ nbr,
                         i64* __restrict__ pos, i64 rows, int k, int replace) {
    if (k < 1 || k > CAP) return;
    const u64 base = (u64)key[0];
    const i64 used = rows_at ? min(rows_at[0], rows) : rows;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    const int lane = threadIdx.x & 31;
    // The warp's lanes take rows i0 .. i0 + 31 together (i0 is the same for all of them, so
    // every lane reaches the __syncwarp; blocks are whole warps). Each lane first draws its
    // row's CSR positions into the row's pos slots; then the warp claims its rows' slots,
    // consecutive lanes taking consecutive slots, so that one load instruction of the warp
    // reads neighboring entries of `indices`: a few 32-byte sectors, where a lane per row
    // would touch one per lane. That is what costs over UVA, where every sector is a PCIe read.
    for (i64 i0 = (i64)blockIdx.x * blockDim.x + (threadIdx.x & ~31); i0 < rows; i0 += stride) {
        const i64 i = i0 + lane;
        if (i < rows) {
            const i64 e0 = i * k;
            int taken = 0;
            const i64 v = i < used ? frontier[i] : -1;
            const i64 start = v >= 0 ? indptr[v] : 0;
            const i64 n = v >= 0 ? indptr[v + 1] - start : 0;
            if (n > 0 && (replace || n > k)) {
                // Above IBP_LOCAL_PICKS the picks are drawn into the row's pos slots, each
                // then turned into its CSR position in place.
                i64 scratch[CAP <= IBP_LOCAL_PICKS ? CAP : 1];
                i64* picked = CAP <= IBP_LOCAL_PICKS ? scratch : pos + e0;
                if (replace) draw_replace<CAP>(base, i, n, k, picked);
                else draw_distinct<CAP>(base, i, n, k, picked);
                for (; taken < k; ++taken) pos[e0 + taken] = start + picked[taken];
            } else {
                for (; taken < n; ++taken) pos[e0 + taken] = start + taken;
            }
            for (int s = taken; s < k; ++s) pos[e0 + s] = -1;
        }
        __syncwarp();
        // IBP_CLAIM_LOADS slots a lane at a time: their loads of `indices` are all issued
        // before the first is used, so a lane waits once for them over UVA, not once each.
        const i64 last = (i0 + 32 < rows ? i0 + 32 : rows) * k;
        for (i64 e = i0 * k + lane; e < last; e += 32 * IBP_CLAIM_LOADS) {
            i64 p[IBP_CLAIM_LOADS];
            I x[IBP_CLAIM_LOADS];
#pragma unroll
            for (int u = 0; u < IBP_CLAIM_LOADS; ++u) {
                p[u] = e + 32 * u < last ? pos[e + 32 * u] : -1;
                x[u] = p[u] >= 0 ? indices[p[u]] : no_entry<I>();
            }
#pragma unroll
            for (int u = 0; u < IBP_CLAIM_LOADS; ++u) {
                if (e + 32 * u >= last) break;
                if (p[u] >= 0) claim_slot<I>(x[u], p[u], e + 32 * u, local, nbr, pos);
                else nbr[e + 32 * u] = -1;
            }
        }
    }
}

template <typename I>
__device__ void hop_all(const i64* __restrict__ indptr, const I* __restrict__ indices,
                        const i64* __restrict__ frontier, const i64* __restrict__ slot_start,
                        long long* local, i64* __restrict__ nbr, i64* __restrict__ pos,
                        i64 rows) {
    const i64 slots = slot_start[rows];
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < slots; e += stride) {
        const i64 i = slot_row(e, 0, slot_start, rows);
        const i64 p = indptr[frontier[i]] + (e - slot_start[i]);
        claim_slot<I>(indices[p], p, e, local, nbr, pos);
    }
}

extern "C" __global__ void __launch_bounds__(IBP_SAMPLE_THREADS)
    ibp_hop_flags(const i64* __restrict__ nbr, const long long* __restrict__ local,
                  i64* __restrict__ flags, i64 slots) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < slots; e += stride) {
        const i64 v = nbr[e];
        flags[e] = v >= 0 ? (local[v] == e ? IBP_FRESH_ONE : 0) + 1 : 0;
    }
}

extern "C" __global__ void __launch_bounds__(IBP_SAMPLE_THREADS)
    ibp_hop_clear(const i64* __restrict__ nodes, const i64* __restrict__ counts, int at,
                  long long* local, i64 cap) {
    const i64 n = counts[at] < cap ? counts[at] : cap;
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride)
        local[nodes[e]] = IBP_UNSEEN;
}

extern "C" __global__ void __launch_bounds__(IBP_SAMPLE_THREADS)
    ibp_hop_pack(const i64* __restrict__ parts, int n_parts, const i64* __restrict__ counts,
                 int rows, i64* __restrict__ out, i64 width) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    const i64 first = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    i64 at = 0;  // where part p starts in `out`
    for (int p = 0; p < n_parts; ++p) {
        const i64* part = reinterpret_cast<const i64*>(parts[4 * p]);
        const i64 cap = parts[4 * p + 1];
        const i64 row_stride = parts[4 * p + 3];
        i64 n = counts[parts[4 * p + 2]];
        n = n < cap ? n : cap;
        for (i64 e = first; e < n; e += stride)
            for (int r = 0; r < rows; ++r) out[r * width + at + e] = part[r * row_stride + e];
        at += n;
    }
}

extern "C" __global__ void __launch_bounds__(IBP_SAMPLE_THREADS)
    ibp_hop_emit(const i64* __restrict__ nbr, const i64* __restrict__ pos,
                 const i64* __restrict__ edge_ids, const i64* __restrict__ cum,
                 const i64* __restrict__ slot_start, long long* local, i64* __restrict__ fresh,
                 i64* __restrict__ row, i64* __restrict__ col, i64* __restrict__ edge,
                 i64* __restrict__ counts, i64 slots, i64 rows, int k, i64 begin, i64 end,
                 int hop, int hops) {
    const i64 first = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (counts) {
        if (begin < 0) {
            end = 0;
            for (int t = 0; t < hop; ++t) end += counts[t];
            begin = end - counts[hop - 1];
        }
        if (first == 0) {
            const i64 total = cum[slots - 1];
            counts[hop] = total >> 32;
            counts[hops + hop] = total & IBP_USED_MASK;
        }
    }
    const i64 stride = (i64)gridDim.x * blockDim.x;
    for (i64 e = first; e < slots; e += stride) {
        const i64 v = nbr[e];
        if (v < 0) continue;
        const i64 at = (cum[e] & IBP_USED_MASK) - 1;
        const i64 seen = relaxed_load(local + v);
        const i64 id = seen < 0 ? seen + IBP_KNOWN : end + (cum[seen] >> 32) - 1;
        if (seen == e) {
            fresh[(cum[e] >> 32) - 1] = v;
            relaxed_store(local + v, id - IBP_KNOWN);
        }
        row[at] = id;
        col[at] = begin + slot_row(e, k, slot_start, rows);
        edge[at] = edge_ids ? edge_ids[pos[e]] : pos[e];
    }
}

#define IBP_HOP_DRAW(NAME, CAP, I)                                                           \
    extern "C" __global__ void __launch_bounds__(IBP_SAMPLE_THREADS)                         \
        NAME(const i64* __restrict__ indptr, const I* __restrict__ indices,                  \
             const i64* __restrict__ frontier, const i64* __restrict__ rows_at,              \
             const i64* __restrict__ key, long long* local, i64* __restrict__ nbr,           \
             i64* __restrict__ pos, i64 rows, int k, int replace) {                          \
        hop_draw<CAP, I>(indptr, indices, frontier, rows_at, key, local, nbr, pos, rows, k,  \
                         replace);                                                           \
    }

#define IBP_HOP_ALL(NAME, I)                                                                 \
    extern "C" __global__ void __launch_bounds__(IBP_SAMPLE_THREADS)                         \
        NAME(const i64* __restrict__ indptr, const I* __restrict__ indices,                  \
             const i64* __restrict__ frontier, const i64* __restrict__ slot_start,           \
             long long* local, i64* __restrict__ nbr, i64* __restrict__ pos, i64 rows) {     \
        hop_all<I>(indptr, indices, frontier, slot_start, local, nbr, pos, rows);            \
    }

IBP_HOP_DRAW(ibp_hop_draw_k32_i32, 32, int)
IBP_HOP_DRAW(ibp_hop_draw_k32_i64, 32, i64)
IBP_HOP_DRAW(ibp_hop_draw_k256_i32, 256, int)
IBP_HOP_DRAW(ibp_hop_draw_k256_i64, 256, i64)
IBP_HOP_DRAW(ibp_hop_draw_k32_pairs, 32, IndexEdge)
IBP_HOP_DRAW(ibp_hop_draw_k256_pairs, 256, IndexEdge)
IBP_HOP_ALL(ibp_hop_all_i32, int)
IBP_HOP_ALL(ibp_hop_all_i64, i64)
IBP_HOP_ALL(ibp_hop_all_pairs, IndexEdge)
