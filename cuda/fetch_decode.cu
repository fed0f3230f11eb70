// Fused fetch + decode of IBP rows (docs/FORMAT.md), one warp per requested row; rows of at
// most 256 bytes of words two a warp, one a half-warp, when both are flat, and in a
// bag-of-words table rows of at most 512 bytes of words two a warp when both are grouped rows
// of clusters without free bits (fetch_decode_halves).
//
// The warp copies its row's stored bytes from the row section (pinned host memory read over
// UVA, or device memory) into shared memory with aligned 16-byte loads (or asynchronous
// 16-byte copies one row ahead: the double-buffered entry points), then decodes it:
// header bits, codes, payloads. Fields of fixed width are placed by per-cluster prefix sums
// computed once per table (`code_prefix`, `free_prefix`: (k, V + 1) u32, entry j the bits of
// columns 0..j-1): the codes of a flat (ungrouped) row (read in the payloads' pass), and the
// payloads of 32 words none of which escapes (one warp vote); the rest by warp prefix sums of
// the field widths. The dictionaries are read code-major (`bitvals` (k, E, V): entry
// [c, e, j], the codec's `match_values`), so the words of 32 neighbouring columns that share a
// code read one line. A chunk of 32 columns of a grouped row that holds no code, and whose
// columns have no free bit, holds no bits at all: its words are their code-0 entries (one load
// a lane, nothing else). A grouped row of a cluster whose columns have no free bit at all
// decodes in one pass (decode_grouped_no_free): where its payloads start follows from the
// prefix sums of the subgroups that hold codes, so each word is read with its code, as its
// code's entry or, escaped, as the payload its rank among the chunk's escapes (a warp vote)
// places. When at least half of its chunks hold codes and its output row is 16-byte aligned,
// each lane takes 16 bytes of neighbouring words (decode_no_free_spans): one code field, one
// 16-byte load of code-0 entries and one 16-byte store a lane, one warp scan for 128 or 64
// columns. Otherwise a warp vote over each 32 of its chunks lists those without a code and
// those with: the former are stored first, four at a time (two of 8-byte words, and two in
// the double-buffered entry points), each lane loading its words of all of them before it
// stores any; then the latter are visited one by one. A word that does not escape is its code's
// entry with its payload deposited into the column's free bits: by two shifts when those bits
// lie in at most two runs (every float column whose mask holds the exponent's top bits, with
// or without the sign: `layouts`), by three shifts and masks when they lie in three (two
// 16-bit floats in a word: `runs`), by a loop over the runs of its free bits otherwise. A
// flat row of more than 64 words whose output row is 16-byte aligned is decoded 16 bytes of
// neighbouring words a lane too (decode_flat_spans), and one of more than 32 4-byte words
// whose output row is 8-byte aligned 8 bytes a lane: its codes one field a lane, its payloads
// placed by a warp scan of the lanes' payload bits. Rows stored raw are copied through.
// Decoded words are written to a row-major output of `row_bytes` bytes per row.
//
// Request r reads row `idx[r]` and writes output row `p = out_pos ? out_pos[r] : r`: the
// host may pass the ids sorted (rows then read in address order) with `out_pos` the
// permutation that puts each row back at its caller's position (a permutation of 0..n-1, not
// checked here). Out-of-range ids are never read: their output row is zero-filled and
// `error[0]` receives 1 + the smallest `p` holding one, the caller's position (whatever the
// order in which warps find them). A row whose fields run past its stored length (a corrupt
// file), or that is longer than the staging buffer, is zero-filled too and sets `error[1]` the
// same way. An output row is therefore always written: the decoded row, or zeros with the
// error slot set.
//
// Blocks have at most IBP_FETCH_THREADS threads (`__launch_bounds__`); the host sizes the
// grid from the kernel's occupancy (ibp_graph/kernels/runtime.py), and the staging buffers
// (`buf_words`) for the table's longest stored row, not for the longest a row could be: a
// bag-of-words table's rows are stored in tens of bytes, so its blocks take little shared
// memory and more of them fit an SM.
//
// Entry points (extern "C"): ibp_fetch_decode_w{4,8}_o{4,8}, word size x offset width, and
// ibp_fetch_decode_db_w{4,8}_o{4,8}, the same with double buffering: each warp stages its next
// row (asynchronous copies) while it decodes the current one.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define FULL_MASK 0xffffffffu
// Most threads per block (32 warps), and one such block fits an SM: at most 64 registers a
// thread. The host launches 8 warps a block by default (a quarter of the register file, the
// rest for training) and up to 32 when asked (`block_warps`).
#define IBP_FETCH_THREADS 1024
#define IBP_FETCH_MIN_BLOCKS 1

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

// The dynamic shared memory array (redefined by the host-side test harness, tests/simt/).
#ifndef IBP_DYNAMIC_SMEM
#define IBP_DYNAMIC_SMEM(T, name) extern __shared__ __align__(16) T name[]
#endif

template <typename W>
struct Word;

template <>
struct Word<u32> {
    static constexpr int BITS = 32;
    __device__ static int ctz(u32 x) { return __ffs(x) - 1; }
    __device__ static int popc(u32 x) { return __popc(x); }
};

template <>
struct Word<u64> {
    static constexpr int BITS = 64;
    __device__ static int ctz(u64 x) { return __ffsll((long long)x) - 1; }
    __device__ static int popc(u64 x) { return __popcll(x); }
};

__device__ __forceinline__ u64 low_mask64(int w) {
    return w >= 64 ? ~0ull : ((1ull << w) - 1ull);
}

// Read `w` (0..64) bits at bit `pos` of a shared-memory buffer of 32-bit words.
__device__ __forceinline__ u64 read_field(const u32* buf, u32 pos, int w) {
    if (w == 0) return 0ull;
    const u32 i = pos >> 5;
    const u32 sh = pos & 31u;
    const u64 lo = (u64)buf[i] | ((u64)buf[i + 1] << 32);
    u64 v = lo >> sh;
    if (sh != 0) v |= (u64)buf[i + 2] << (64 - sh);
    return v & low_mask64(w);
}

// Read `w` (0..32) bits at bit `pos` of a shared-memory buffer of 32-bit words: one funnel
// shift of the two words the field can touch, and one more for the mask of `w` low bits (the
// clamped shift gives all 32 at w = 32). Unlike read_field it reads the words even for w = 0,
// at positions read_field reads for the fields around it (in the warp's buffer).
__device__ __forceinline__ u32 read_bits(const u32* buf, u32 pos, int w) {
    const u32 i = pos >> 5;
    const u32 v = __funnelshift_r(buf[i], buf[i + 1], pos & 31u);
    return v & __funnelshift_lc(0xffffffffu, 0u, (u32)w);
}

// A field of up to a whole word of type W: one funnel shift for 4-byte words.
template <typename W>
__device__ __forceinline__ W read_word(const u32* buf, u32 pos, int w);

template <>
__device__ __forceinline__ u32 read_word<u32>(const u32* buf, u32 pos, int w) {
    return read_bits(buf, pos, w);
}

template <>
__device__ __forceinline__ u64 read_word<u64>(const u32* buf, u32 pos, int w) {
    return read_field(buf, pos, w);
}

// Deposit the low bits of `p` into the set bits of `m`, in ascending order (inverse pext).
template <typename W>
__device__ __forceinline__ W pdep(W p, W m) {
    W out = 0;
    while (m) {
        const int lo = Word<W>::ctz(m);
        const W shifted = m >> lo;
        const W inv = ~shifted;
        const int len = inv == 0 ? Word<W>::BITS - lo : Word<W>::ctz(inv);
        const W lm = len >= Word<W>::BITS ? ~W(0) : ((W(1) << len) - 1);
        out |= (p & lm) << lo;
        p = len >= Word<W>::BITS ? W(0) : (p >> len);
        m &= ~(lm << lo);
    }
    return out;
}

// A column's layout word (`layouts`, (k, V) u32, built once per table by the host:
// ibp_graph/kernels/fetch_decode.py, column_layouts): bits 0-6 its free bits' count F, 7-12
// the length N1 < word bits of the first run of free bits, bit 13 set when the free bits form
// exactly three runs, 14-19 where the first run starts, 20-25 where the second run starts,
// bit 26 set when the free bits lie in at most those two runs (no free bit: N1 = 0; all free:
// the runs [0, bits - 1) and [bits - 1, bits)), 27-31 the code width.
#define LAYOUT_THREE_RUNS (1u << 13)
#define LAYOUT_TWO_RUNS (1u << 26)
__device__ __forceinline__ u32 layout_free_bits(u32 layout) { return layout & 127u; }
__device__ __forceinline__ int layout_code_width(u32 layout) { return (int)(layout >> 27); }

// `p`, which the compiler may no longer see as a kernel parameter plus an offset: a table's
// per-row base held in registers, so that each load from it is one multiply-add of a u32 index
// (the compiler otherwise re-adds the 64-bit offset to the parameter for every load, four
// instructions a load). Read it with `ro`: the compiler no longer knows it for read-only
// global memory either.
template <typename T>
__device__ __forceinline__ const T* held(const T* p) {
#ifdef __CUDA_ARCH__
    asm("" : "+l"(p));
#endif
    return p;
}

// `p[i]` through the read-only data cache.
template <typename T>
__device__ __forceinline__ T ro(const T* p, u32 i) {
#ifdef __CUDA_ARCH__
    return __ldg(p + i);
#else
    return p[i];
#endif
}

// The entries of the runs table (`runs`, below) from column `col0` (a cluster's first: the
// cluster times V) on: their address summed as an integer, since a table with no column of
// more than two runs has one entry in all (never read), and a later cluster's entries' address
// lies past it.
template <typename W>
__device__ __forceinline__ const W* runs_from(const W* runs, size_t col0) {
    return reinterpret_cast<const W*>(reinterpret_cast<u64>(runs) + col0 * (4 * sizeof(W)));
}

// A column's entry of the runs table (`runs`, (k, V, 4) words, built once per table by the
// host: ibp_graph/kernels/fetch_decode.py, column_runs), which deposit reads for a column
// whose free bits lie in three runs or more: for three, the runs' masks, first to third, then
// their shifts (bits 0-7, 8-15 and 16-23: where a run starts less the payload bits before it);
// for more, the free bits, then zeros. Zeros for one or two runs (the layout word suffices;
// never read: a table with no column of more runs has one entry in all).
//
// Deposit the F low bits of `p` (nothing above them) into a column's free bits: two shifts
// when its layout has at most two runs; three shifts and masks when it has three (two 16-bit
// floats in a 32-bit word: each half's low bits, then the low half's sign with the high
// half's low bits, then the high half's sign), read off its entry (column `j` of `runs`);
// otherwise the loop over the runs of its free bits, the entry's first word.
template <typename W>
__device__ __forceinline__ W deposit(W p, u32 layout, const W* __restrict__ runs, u32 j) {
    const int n1 = (int)((layout >> 7) & 63u);
    const int lo1 = (int)((layout >> 14) & 63u);
    const int lo2 = (int)((layout >> 20) & 63u);
    const W first = (p & ((W(1) << n1) - W(1))) << lo1;
    if (layout & LAYOUT_TWO_RUNS) return first | ((p >> n1) << lo2);
    if (layout & LAYOUT_THREE_RUNS) {
        if constexpr (sizeof(W) == 4) {
            const uint4 r = ro(reinterpret_cast<const uint4*>(runs), j);  // (one 16-byte load)
            return (__funnelshift_l(0u, p, r.w) & r.x) | (__funnelshift_l(0u, p, r.w >> 8) & r.y) |
                   (__funnelshift_l(0u, p, r.w >> 16) & r.z);
        } else {
            const ulonglong2 a = ro(reinterpret_cast<const ulonglong2*>(runs), 2 * j);
            const ulonglong2 b = ro(reinterpret_cast<const ulonglong2*>(runs), 2 * j + 1);
            const u32 sh = (u32)b.y;
            return ((p << (sh & 63u)) & a.x) | ((p << ((sh >> 8) & 63u)) & a.y) |
                   ((p << ((sh >> 16) & 63u)) & b.x);
        }
    }
    return pdep<W>(p, ro(runs, 4 * j));
}

// The inclusive sum of `v` over the lanes of each LANES-lane segment of the warp (32: the
// whole warp; 16: each half), up to this lane.
template <int LANES = 32>
__device__ __forceinline__ u32 warp_inclusive_scan(u32 v, int lane) {
#pragma unroll
    for (int d = 1; d < LANES; d <<= 1) {
        const u32 t = __shfl_up_sync(FULL_MASK, v, d);
        if ((lane & (LANES - 1)) >= d) v += t;
    }
    return v;
}

template <typename W>
__device__ __forceinline__ void store_word(u8* out_row, int j, W word, int row_bytes,
                                           bool word_aligned) {
    const int at = j * (int)sizeof(W);
    if (word_aligned) {
        reinterpret_cast<W*>(out_row)[j] = word;
        return;
    }
#pragma unroll
    for (int b = 0; b < (int)sizeof(W); ++b) {
        if (at + b < row_bytes) out_row[at + b] = (u8)(word >> (8 * b));
    }
}

// Copies of 16 bytes into shared memory that complete later (cp.async on sm_80 and newer, a
// plain copy before), in groups: commit closes the group of the copies issued since the last
// one, wait_one waits until at most one of this thread's groups is still in flight. The
// host-side test harness (tests/simt/) redefines them, deferring each copy to the wait.
#ifndef IBP_ASYNC_COPY_DEFINED
#define IBP_ASYNC_COPY_DEFINED
__device__ __forceinline__ void copy_async16(void* dst, const void* src) {
#if __CUDA_ARCH__ >= 800
    const u32 s = (u32)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
#else
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void copy_async_wait_one() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
#endif
}
#endif

// Where a requested row's stored bytes sit, and its cluster: `cluster` < 0 when nothing is
// staged, ROW_OUT_OF_RANGE for an out-of-range id, ROW_TOO_LONG for a row longer than the
// staging buffer (four registers: the double-buffered entry points hold three).
struct Staged {
    u64 start;    // byte offset in the row section
    u32 len;      // stored bytes (of a row that fits the staging buffer)
    int cluster;  // the row's cluster, or ROW_OUT_OF_RANGE / ROW_TOO_LONG
};
#define ROW_OUT_OF_RANGE (-1)
#define ROW_TOO_LONG (-2)

// The 16-byte chunks that hold a row stored at `start`, `len` bytes long.
__device__ __forceinline__ u64 row_chunks(u64 start, u64 len) {
    return ((start & 15ull) + len + 15) >> 4;
}

// The stored span of row `id` (its two offsets read) and its cluster (read beside them; 0
// without `cluster_ids`): cluster ROW_OUT_OF_RANGE when `id` is out of range, ROW_TOO_LONG
// when its chunks and two zero words do not fit a staging buffer of `buf_words` u32. The
// host sizes the buffers for the table's longest row, so a row longer than that (offsets
// that do not match what the host was told) is refused, not staged past the buffer.
template <typename O>
__device__ __forceinline__ Staged locate_row(const O* __restrict__ offsets,
                                             const u8* __restrict__ cluster_ids, i64 id,
                                             i64 num_rows, int align, int buf_words) {
    Staged s = {0, 0, ROW_OUT_OF_RANGE};
    if (id >= 0 && id < num_rows) {
        const int cluster = cluster_ids ? (int)cluster_ids[id] : 0;
        const u64 start = (u64)offsets[id] * (u64)align;
        const u64 len = (u64)offsets[id + 1] * (u64)align - start;
        s.start = start;
        s.len = (u32)len;
        s.cluster = row_chunks(start, len) * 4 + 2 > (u64)buf_words ? ROW_TOO_LONG : cluster;
    }
    return s;
}

// Stage the 16-byte-aligned span holding row `s` (nothing for row -1) into `buf` (u32 words),
// then two zero words for reads that straddle its end, by LANES lanes (`lane` 0..LANES-1).
// ASYNC: with `copy_async16` (the caller commits and waits); otherwise with plain loads (the
// caller syncs the warp).
template <bool ASYNC, int LANES = 32>
__device__ __forceinline__ void stage_row(const u8* __restrict__ rows, const Staged& s,
                                          u32* buf, int lane) {
    if (s.cluster < 0) return;
    const u64 first = s.start & ~15ull;
    const int chunks = (int)row_chunks(s.start, s.len);
    const uint4* src = reinterpret_cast<const uint4*>(rows + first);
    uint4* dst = reinterpret_cast<uint4*>(buf);
    for (int q = lane; q < chunks; q += LANES) {
        if (ASYNC) {
            copy_async16(dst + q, src + q);
        } else {
            dst[q] = src[q];
        }
    }
    if (lane < 2) buf[chunks * 4 + lane] = 0u;
}

// Zero an output row by LANES lanes (the warp, or a half of it: `lane` 0..LANES-1 within it).
template <typename W, int LANES = 32>
__device__ __forceinline__ void zero_row(u8* out_row, int V, int row_bytes, bool word_aligned,
                                         int lane) {
    for (int j = lane & (LANES - 1); j < V; j += LANES) {
        store_word<W>(out_row, j, W(0), row_bytes, word_aligned);
    }
}

// A row whose fields run past its stored length (a corrupt file): zero it and record output
// position `p` in `error[1]`, by LANES lanes (uniform among them; the caller returns).
template <typename W, int LANES = 32>
__device__ __forceinline__ void reject_corrupt_row(u8* out_row, int* error, i64 p, int V,
                                                   int row_bytes, bool word_aligned, int lane) {
    if ((lane & (LANES - 1)) == 0) record_first(&error[1], p);
    zero_row<W, LANES>(out_row, V, row_bytes, word_aligned, lane);
}

// How many chunks without a code a lane loads a word of before it stores any: 16 bytes of
// words (four 4-byte words or two 8-byte ones), or two words in the double-buffered entry
// points, whose registers are taken by the next row's staging (when this was chosen, four
// 4-byte words there spilled 136 bytes on sm_80 and 48 on sm_90, against 28 and 0 with two:
// kernel-resources.md).
template <typename W, int BUFFERS>
struct Code0Loads {
    static constexpr int value = BUFFERS == 1 ? 16 / (int)sizeof(W) : 2;
};

// The chunks without a code among the 32 from chunk `q0` of a grouped row (`empty`, bit i:
// chunk q0 + i, from a warp vote), in a cluster whose columns have no free bit: every word
// is its column's code-0 entry (`entries` [j]). Only those chunks are visited, and U at a
// time, each lane loading its word of each before it stores any: that many loads in flight,
// where one chunk at a time is one load, its store and a branch. Which chunks a round takes
// follows from the mask before and after it, so no array of flags is kept (one made the
// double-buffered entry points spill), and a row whose chunks all hold codes costs nothing
// here. `U` is `Code0Loads`.
template <typename W, int U>
__device__ __forceinline__ void store_code0_chunks(unsigned empty, int q0,
                                                   const W* __restrict__ entries, u8* out_row,
                                                   int V, int row_bytes, bool word_aligned,
                                                   int lane) {
    while (empty != 0) {  // warp-uniform
        unsigned left = empty;  // this round takes the lowest U bits of it
        W word[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            word[u] = W(0);
            if (empty != 0) {
                const int j = 32 * (q0 + __ffs((int)empty) - 1) + lane;
                if (j < V) word[u] = entries[j];
                empty &= empty - 1u;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (left != empty) {  // chunk u of this round
                const int j = 32 * (q0 + __ffs((int)left) - 1) + lane;
                if (j < V) store_word<W>(out_row, j, word[u], row_bytes, word_aligned);
                left &= left - 1u;
            }
        }
    }
}

// The sum of `v` over the warp's lanes (every lane gets it): one reduction on sm_80 and newer.
__device__ __forceinline__ u32 warp_sum(u32 v, int lane) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    return __reduce_add_sync(FULL_MASK, v);
#else
    return __shfl_sync(FULL_MASK, warp_inclusive_scan(v, lane), 31);
#endif
}

// Neighbouring columns a lane of decode_no_free_spans decodes: 16 bytes of words (four
// 4-byte words, two 8-byte ones), so that a warp covers 32 * LaneWords columns at a time.
template <typename W>
struct LaneWords {
    static constexpr int value = 16 / (int)sizeof(W);
};

// An access of `n` bytes (8 or 16) at `p` is n-byte aligned: a misaligned one faults on a
// GPU; the host-side test harness (tests/simt/), where it would not, checks it.
#ifndef IBP_CHECK_ALIGNED
#define IBP_CHECK_ALIGNED(p, n)
#endif

// The N values at `p` in one load of N * sizeof(T) bytes, 16 or 8 (`p` aligned to it),
// through the read-only data cache.
template <typename T, int N>
__device__ __forceinline__ void load_vector(const T* __restrict__ p, T (&out)[N]) {
    static_assert(N * sizeof(T) == 16 || N * sizeof(T) == 8, "a 16- or 8-byte load");
    IBP_CHECK_ALIGNED(p, N * sizeof(T));
    if constexpr (N * sizeof(T) == 16) {
        const uint4 v = ro(reinterpret_cast<const uint4*>(p), 0u);
        memcpy(out, &v, 16);
    } else {
        const uint2 v = ro(reinterpret_cast<const uint2*>(p), 0u);
        memcpy(out, &v, 8);
    }
}

// Bit i: column j + i of a lane's K neighbouring columns j .. j + K - 1 is below V.
template <int K>
__device__ __forceinline__ u32 lane_in_row(int j, int V) {
    return j + K <= V ? (1u << K) - 1u : j < V ? (1u << (V - j)) - 1u : 0u;
}

// Store a lane's K words of columns j .. j + K - 1 (16 or 8 bytes) of an `out_row` aligned to
// that size (j a multiple of K): one store when all K lie wholly inside the row, else word by
// word those whose bit is set in `in_row`.
template <typename W, int K>
__device__ __forceinline__ void store_lane_words(u8* out_row, int j, u32 in_row,
                                                 const W (&word)[K], int row_bytes,
                                                 bool word_aligned) {
    static_assert(K * sizeof(W) == 16 || K * sizeof(W) == 8, "a 16- or 8-byte store");
    if ((j + K) * (int)sizeof(W) <= row_bytes) {
        u8* p = out_row + (size_t)j * sizeof(W);
        IBP_CHECK_ALIGNED(p, K * sizeof(W));
        if constexpr (K * sizeof(W) == 16) {
            uint4 v;
            memcpy(&v, word, 16);
            *reinterpret_cast<uint4*>(p) = v;
        } else {
            uint2 v;
            memcpy(&v, word, 8);
            *reinterpret_cast<uint2*>(p) = v;
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < K; ++i) {
        if ((in_row >> i) & 1u) store_word<W>(out_row, j + i, word[i], row_bytes, word_aligned);
    }
}

// The chunk pass of decode_grouped_no_free for a row with few chunks that hold codes: of each
// 32 chunks, a warp vote lists those without a code, stored first (store_code0_chunks), and
// those with, visited in column order. In a chunk with codes, a warp scan of the lanes' code
// widths places each lane's code; a ballot counts the chunk's escapes, and a lane's rank among
// them places its payload. `payloads_at` is where the payloads start, then advances; returns
// false (and stops) when they run past the row's `len_bits`.
template <typename W, int U>
__device__ bool decode_no_free_chunks(const u32* buf, const u8* subs, u32 codes_at,
                                       u32& payloads_at, u32 base, u64 len_bits,
                                       const u8* __restrict__ widths,
                                       const W* __restrict__ entries, u8* out_row, int V,
                                       int row_bytes, bool word_aligned, int lane) {
    const int TB = Word<W>::BITS;
    const int C = (V + 31) >> 5;
    const unsigned below = (1u << lane) - 1u;  // the lanes before this one
    // 32 chunks at a time, a vote lists those without a code, stored first, and those with,
    // visited in column order: the warp goes from one listed chunk to the next.
    for (int q0 = 0; q0 < C; q0 += 32) {
        const bool in_row = q0 + lane < C;
        store_code0_chunks<W, U>(__ballot_sync(FULL_MASK, in_row && subs[q0 + lane] == 0),
                                 q0, entries, out_row, V, row_bytes, word_aligned, lane);
        // (voted after the stores, so that the mask is not held across them)
        unsigned coded = __ballot_sync(FULL_MASK, in_row && subs[q0 + lane] != 0);
        for (; coded != 0; coded &= coded - 1u) {
            const u32 j0 = 32u * (u32)(q0 + __ffs((int)coded) - 1);
            const u32 j = j0 + (u32)lane;
            const u32 sub = subs[j0 >> 5];  // warp-uniform, not 0
            u32 w = 0;  // the lane's code width, 0 for a column without a code
            if (j < (u32)V && ((sub >> ((j & 31) >> 3)) & 1u)) w = (u32)ro(widths, j);
            const u32 incl = warp_inclusive_scan(w, lane);
            const u32 code = read_bits(buf, codes_at + incl - w, (int)w);
            codes_at += __shfl_sync(FULL_MASK, incl, 31);
            const bool escaped = w != 0 && code == (1u << w) - 1u;
            const unsigned escapes = __ballot_sync(FULL_MASK, escaped);
            const u32 n_escaped = (u32)__popc(escapes);
            if (n_escaped != 0 && (u64)(payloads_at + n_escaped * TB - base) > len_bits) {
                return false;
            }
            if (j < (u32)V) {
                const u32 at = payloads_at + (u32)__popc(escapes & below) * TB;
                const W word = escaped ? read_word<W>(buf, at, TB)
                                       : ro(entries, code * (u32)V + j);
                store_word<W>(out_row, (int)j, word, row_bytes, word_aligned);
            }
            payloads_at += n_escaped * TB;
        }
    }
    return true;
}

// The pass of decode_grouped_no_free for a row most of whose chunks hold codes, written to a
// 16-byte aligned `out_row`. Each lane takes K = LaneWords neighbouring columns (of one
// subgroup: K divides 8), so a warp covers 32 K columns a step and a lane's words are one
// aligned 16-byte store. Each lane loads its words' code-0 entries (one 16-byte load where
// the dictionaries are aligned); where some lane's columns hold codes (a warp vote), a warp
// scan of the lanes' code bits places each lane's codes, read as one field, words of another
// code load their entries, and the lanes' escape counts (at most K) place the escaped words'
// payloads: one vote where no lane has two or more, else one a bit of the count. A lane
// whose columns run past the row takes them word by word. `payloads_at` is where the payloads
// start, then advances; returns false (and stops) when they run past the row's `len_bits`.
template <typename W>
__device__ bool decode_no_free_spans(const u32* buf, const u8* subs, u32 codes_at,
                                     u32& payloads_at, u32 base, u64 len_bits,
                                     const u8* __restrict__ widths,
                                     const W* __restrict__ entries, u8* out_row, int V,
                                     int row_bytes, bool word_aligned, int lane) {
    constexpr int K = LaneWords<W>::value;
    const int TB = Word<W>::BITS;
    const unsigned below = (1u << lane) - 1u;  // the lanes before this one
    const bool vec_in = ((size_t)entries & 15) == 0;
    const bool vec_widths = ((size_t)widths % K) == 0;
    for (int j0 = 0; j0 < V; j0 += 32 * K) {
        const int j = j0 + K * lane;  // the lane's first column
        const bool whole = j + K <= V;  // all K columns in the row
        // Bit i: column j + i is in the row (`in_row`); it has a code (`coded`): the bit of
        // its subgroup.
        const u32 in_row = lane_in_row<K>(j, V);
        const u32 coded = in_row != 0 && ((subs[j >> 5] >> ((j & 31) >> 3)) & 1u) ? in_row : 0u;
        // The code-0 entries, loaded before the codes are read (most words are code 0).
        W word[K];
        if (vec_in && whole) {
            load_vector<W, K>(entries + j, word);
        } else {
#pragma unroll
            for (int i = 0; i < K; ++i) {
                word[i] = (in_row >> i) & 1u ? ro(entries, (u32)(j + i)) : W(0);
            }
        }
        if (__ballot_sync(FULL_MASK, coded != 0) != 0) {
            u32 w[K];  // code widths, 0 for a word without a code
            if (vec_widths && whole) {  // the K widths in one load
                u32 packed = 0;
                if (coded != 0) {
                    packed = K == 4 ? ro(reinterpret_cast<const u32*>(widths + j), 0u)
                                    : (u32)ro(reinterpret_cast<const unsigned short*>(widths + j),
                                              0u);
                }
#pragma unroll
                for (int i = 0; i < K; ++i) {
                    w[i] = (coded >> i) & 1u ? (packed >> (8 * i)) & 255u : 0u;
                }
            } else {
#pragma unroll
                for (int i = 0; i < K; ++i) {
                    w[i] = (coded >> i) & 1u ? (u32)ro(widths, (u32)(j + i)) : 0u;
                }
            }
            u32 lane_bits = 0;
#pragma unroll
            for (int i = 0; i < K; ++i) lane_bits += w[i];
            const u32 incl = warp_inclusive_scan(lane_bits, lane);
            const u32 field = read_bits(buf, codes_at + incl - lane_bits, (int)lane_bits);
            codes_at += __shfl_sync(FULL_MASK, incl, 31);
            u32 code[K];
            u32 escaped = 0, other = 0;  // bit i: column j + i escapes; has another code than 0
            u32 shift = 0;
#pragma unroll
            for (int i = 0; i < K; ++i) {
                const u32 all = (1u << w[i]) - 1u;
                code[i] = (field >> shift) & all;
                shift += w[i];
                const bool escapes = w[i] != 0 && code[i] == all;
                escaped |= (u32)escapes << i;
                other |= (u32)(!escapes && code[i] != 0) << i;
            }
            if (__ballot_sync(FULL_MASK, other != 0) != 0) {  // their own entries
#pragma unroll
                for (int i = 0; i < K; ++i) {
                    if ((other >> i) & 1u) word[i] = ro(entries, code[i] * (u32)V + (u32)(j + i));
                }
            }
            // Escaped words: a lane's payloads follow those of the lanes before it, placed by
            // the lanes' escape counts (0..K): one vote where no lane has two or more, else
            // one a bit of the count.
            if (__ballot_sync(FULL_MASK, escaped != 0) != 0) {
                const u32 mine = (u32)__popc(escaped);
                const unsigned e1 = __ballot_sync(FULL_MASK, mine & 1u);
                unsigned e2 = 0, e4 = 0;
                if (__ballot_sync(FULL_MASK, mine > 1u) != 0) {
                    e2 = __ballot_sync(FULL_MASK, mine & 2u);
                    e4 = __ballot_sync(FULL_MASK, mine & 4u);
                }
                const u32 total = (u32)(__popc(e1) + 2 * __popc(e2) + 4 * __popc(e4));
                if ((u64)(payloads_at + total * TB - base) > len_bits) return false;
                u32 at = payloads_at + (u32)(__popc(e1 & below) + 2 * __popc(e2 & below) +
                                             4 * __popc(e4 & below)) * TB;
#pragma unroll
                for (int i = 0; i < K; ++i) {
                    if ((escaped >> i) & 1u) {
                        word[i] = read_word<W>(buf, at, TB);
                        at += TB;
                    }
                }
                payloads_at += total * TB;
            }
        }
        store_lane_words<W, K>(out_row, j, in_row, word, row_bytes, word_aligned);
    }
    return true;
}

// Decode a grouped row `s` of cluster `c`, none of whose columns has a free bit, in one pass
// (the row's header read, `subs` its subgroup bits): its codes start at bit `codes_at` of
// `buf`, and its payloads follow them (where, the prefix sums of the code widths of its
// subgroups with codes say). A word is its code's entry, or, when its code is the escape, the
// next payload (T * 8 bits, in column order). A row at least half of whose chunks hold codes
// is decoded K neighbouring columns a lane (decode_no_free_spans), one with fewer a chunk of
// 32 at a time, visiting only the chunks with codes (decode_no_free_chunks). The row is
// zeroed, and output position `p` recorded in `error[1]`, when its codes or payloads run past
// its stored length. `U` is `Code0Loads`.
template <typename W, int U>
__device__ void decode_grouped_no_free(const u32* buf, const u8* subs, const Staged& s,
                                       u32 codes_at, u32 base, int c,
                                       const u8* __restrict__ code_bits,
                                       const u32* __restrict__ code_prefix,
                                       const W* __restrict__ bitvals, u8* out_row, int* error,
                                       i64 p, int V, int E, int row_bytes, bool word_aligned,
                                       int lane) {
    const int C = (V + 31) >> 5;
    const u64 len_bits = (u64)s.len * 8;
    const u32* __restrict__ prefix = held(code_prefix + (size_t)c * (V + 1));
    // Where the payloads start: past the codes of every subgroup that holds some (lane q sums
    // chunk q's, by the prefix sums; its four subgroups' loads are in flight together); and
    // how many chunks hold codes.
    u32 payloads_at = codes_at;
    int coded_chunks = 0;
    for (int q0 = 0; q0 < C; q0 += 32) {
        const int q = q0 + lane;
        const u32 sub = q < C ? (u32)subs[q] : 0u;
        u32 bits = 0;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const u32 lo = (u32)(32 * q + 8 * t);
            if ((sub >> t) & 1u) bits += ro(prefix, min(lo + 8u, (u32)V)) - ro(prefix, lo);
        }
        payloads_at += warp_sum(bits, lane);
        coded_chunks += __popc(__ballot_sync(FULL_MASK, sub != 0));
    }
    if ((u64)(payloads_at - base) > len_bits) {  // the header and codes run past the row
        reject_corrupt_row<W>(out_row, error, p, V, row_bytes, word_aligned, lane);
        return;
    }
    const u8* __restrict__ widths = held(code_bits + (size_t)c * V);
    const W* __restrict__ entries = held(bitvals + (size_t)c * E * V);  // [e * V + j]
    const bool fits =
        2 * coded_chunks >= C && ((size_t)out_row & 15) == 0
            ? decode_no_free_spans<W>(buf, subs, codes_at, payloads_at, base, len_bits, widths,
                                      entries, out_row, V, row_bytes, word_aligned, lane)
            : decode_no_free_chunks<W, U>(buf, subs, codes_at, payloads_at, base, len_bits,
                                          widths, entries, out_row, V, row_bytes, word_aligned,
                                          lane);
    if (!fits) reject_corrupt_row<W>(out_row, error, p, V, row_bytes, word_aligned, lane);
}

// Store a lane's K words of columns j .. j + K - 1 (16 bytes) of `out_row`, whatever its
// alignment: one 16-byte store where it is 16-byte aligned, two 8-byte stores where it is
// 8-byte aligned, else word by word.
template <typename W, int K>
__device__ __forceinline__ void store_lane_words_any(u8* out_row, int j, u32 in_row,
                                                     const W (&word)[K], int row_bytes,
                                                     bool word_aligned) {
    static_assert(K * sizeof(W) == 16, "16 bytes of words");
    constexpr int H = K / 2;
    if (((size_t)out_row & 15) == 0) {
        store_lane_words<W, K>(out_row, j, in_row, word, row_bytes, word_aligned);
    } else if (((size_t)out_row & 7) == 0) {
        W lo[H], hi[H];
#pragma unroll
        for (int i = 0; i < H; ++i) {
            lo[i] = word[i];
            hi[i] = word[H + i];
        }
        store_lane_words<W, H>(out_row, j, in_row & ((1u << H) - 1u), lo, row_bytes,
                               word_aligned);
        store_lane_words<W, H>(out_row, j + H, in_row >> H, hi, row_bytes, word_aligned);
    } else {
#pragma unroll
        for (int i = 0; i < K; ++i) {
            if ((in_row >> i) & 1u) store_word<W>(out_row, j + i, word[i], row_bytes, word_aligned);
        }
    }
}

// The pass of decode_row for a flat (ungrouped) row, K neighbouring columns a lane (16 or 8
// bytes of words; `out_row` aligned to that), 32 K columns a step. Every column has a code, so
// a lane's codes are one field at its first column's code prefix (`cpre`, from `code_at`),
// and its payloads follow one another from where a warp scan of the lanes' payload widths
// (the free bits, or T * 8 for an escaped word) places them (from `cursor`). A word that does
// not escape is its code's entry with its payload deposited into its column's free bits.
// The lane loads its layout words in one load where aligned and stores its words in one. A
// lane whose columns run past the row takes them word by word. Returns false (and stops)
// when the payloads run past the row's `len_bits`.
//
// LANES 16 (fetch_decode_halves): each half of the warp decodes a row of its own of at most
// 16 K words, in one step, the scan and the shuffles over its 16 lanes, its `out_row` aligned
// to its words or not; a half that is not `live` (no request, or its codes run past its row)
// takes part in the shuffles with no column. A half's `return false` comes after the step's
// last shuffle, so the halves never part ways at one.
template <typename W, int K, int LANES = 32>
__device__ bool decode_flat_spans(const u32* buf, u32 code_at, u32 cursor, u32 base,
                                  u64 len_bits, const W* __restrict__ entries,
                                  const u32* __restrict__ cpre,
                                  const u32* __restrict__ layout_of,
                                  const W* __restrict__ run_of, u8* out_row, int V,
                                  int row_bytes, bool word_aligned, int lane,
                                  bool live = true) {
    const int TB = Word<W>::BITS;
    const bool vec_layouts = ((size_t)layout_of % (4 * K)) == 0;
    // (16 lanes: one step, since V <= 16 K)
    for (int j0 = 0; j0 < (LANES == 32 ? V : 1); j0 += LANES * K) {
        const int j = j0 + K * (lane & (LANES - 1));  // the lane's first column
        const u32 in_row = live ? lane_in_row<K>(j, V) : 0u;
        u32 layout[K];
        if (in_row == (1u << K) - 1u && vec_layouts) {  // K layout words in one load
            load_vector<u32, K>(layout_of + j, layout);
        } else {
#pragma unroll
            for (int i = 0; i < K; ++i) {
                layout[i] = (in_row >> i) & 1u ? ro(layout_of, (u32)(j + i)) : 0u;
            }
        }
        // The lane's codes, one field at its first column's code prefix.
        u32 code_bits_total = 0;
#pragma unroll
        for (int i = 0; i < K; ++i) code_bits_total += (u32)layout_code_width(layout[i]);
        const u32 field =
            in_row != 0 ? read_bits(buf, code_at + ro(cpre, (u32)j), (int)code_bits_total) : 0u;
        u32 code[K], esc[K];
        u32 lane_bits = 0;  // the lane's payload bits
        u32 shift = 0;
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const int b = layout_code_width(layout[i]);
            esc[i] = (1u << b) - 1u;
            code[i] = (field >> shift) & esc[i];
            shift += (u32)b;
            if ((in_row >> i) & 1u) {
                lane_bits += code[i] == esc[i] ? (u32)TB : layout_free_bits(layout[i]);
            }
        }
        const u32 incl = warp_inclusive_scan<LANES>(lane_bits, lane);
        const u32 end = cursor + __shfl_sync(FULL_MASK, incl, lane | (LANES - 1));
        if (live && (u64)(end - base) > len_bits) return false;  // uniform in the segment
        u32 at = cursor + incl - lane_bits;
        W word[K];
#pragma unroll
        for (int i = 0; i < K; ++i) {
            word[i] = W(0);
            if ((in_row >> i) & 1u) {
                const bool escaped = code[i] == esc[i];
                const int w = escaped ? TB : (int)layout_free_bits(layout[i]);
                const W payload = read_word<W>(buf, at, w);
                at += (u32)w;
                word[i] = escaped ? payload
                                  : (W)(ro(entries, code[i] * (u32)V + (u32)(j + i)) |
                                        deposit<W>(payload, layout[i], run_of, (u32)(j + i)));
            }
        }
        if (LANES == 32 || in_row != 0) {  // (a half that is not live writes nothing)
            if constexpr (LANES == 32) {
                store_lane_words<W, K>(out_row, j, in_row, word, row_bytes, word_aligned);
            } else {
                store_lane_words_any<W, K>(out_row, j, in_row, word, row_bytes, word_aligned);
            }
        }
        cursor = end;
    }
    return true;
}

// Decode the staged row `s` (its span in `buf`, the warp synced; of cluster `s.cluster`) into
// `out_row`, or zero it and record output position `p` in `error[1]` when its fields run past
// its stored length. `codes` (V bytes) and `subs` (C bytes) are the warp's scratch; `U`,
// `Code0Loads`. WIDE_FLAT false (fetch_decode_halves, whose rows of more than 64 words are a
// bag-of-words table's and seldom flat): a flat row of more than 64 words takes the 8-byte
// lanes or the chunk loop, not 16 bytes a lane, whose registers made the two-rows loop spill
// (kernel-resources.md).
template <typename W, int U, bool WIDE_FLAT = true>
__device__ void decode_row(const u32* buf, u8* codes, u8* subs, const Staged& s,
                           const W* __restrict__ runs,
                           const u8* __restrict__ code_bits, const W* __restrict__ bitvals,
                           const u32* __restrict__ code_prefix,
                           const u32* __restrict__ free_prefix,
                           const u32* __restrict__ layouts, u8* out_row, int* error, i64 p,
                           int V, int E, int row_bytes, bool word_aligned, int lane) {
    const int C = (V + 31) >> 5;
    const int TB = Word<W>::BITS;
    const int raw_bytes = V * (int)sizeof(W);
    const u32 base = (u32)(s.start & 15ull) * 8u;
    const u64 len = s.len;
    if (len >= (u64)raw_bytes) {
        for (int j = lane; j < V; j += 32) {
            const W word = read_word<W>(buf, base + (u32)j * TB, TB);
            store_word<W>(out_row, j, word, row_bytes, word_aligned);
        }
        return;
    }
    const int c = s.cluster;
    const size_t col0 = (size_t)c * V;
    const size_t pre0 = (size_t)c * (V + 1);  // this cluster's prefix sums
    const bool grouped = read_bits(buf, base, 1) != 0;
    // No column of the cluster has a free bit (bag-of-words tables): every word that does not
    // escape is its code's entry, and the row decodes in one pass (decode_grouped_no_free).
    const bool no_free = grouped && free_prefix[pre0 + V] == 0;
    u32 cursor = base + 1;
    if (grouped) {
        cursor += (u32)C;
        const unsigned below = (1u << lane) - 1u;  // the lanes before this one
        for (int q0 = 0; q0 < C; q0 += 32) {
            const int q = q0 + lane;
            u32 w = 0;
            if (q < C && read_bits(buf, base + 1 + q, 1)) {
                const int in_chunk = min(32, V - 32 * q);
                w = (u32)((in_chunk + 7) >> 3);
            }
            // Every chunk before q has 32 columns, so 4 bits where it has subgroup bits; the
            // 32 chunks' total is where the last of them (in the row) ends.
            const u32 before = 4u * (u32)__popc(__ballot_sync(FULL_MASK, w != 0) & below);
            if (q < C) subs[q] = (u8)read_bits(buf, cursor + before, (int)w);
            cursor += __shfl_sync(FULL_MASK, before + w, min(31, C - 1 - q0));
        }
        __syncwarp();
        if (no_free) {
            decode_grouped_no_free<W, U>(buf, subs, s, cursor, base, c, code_bits,
                                         code_prefix, bitvals, out_row, error, p, V, E,
                                         row_bytes, word_aligned, lane);
            return;
        }
    }
    const u32 code_at = cursor;  // a flat row's codes: each at its column's code prefix
    if (!grouped) {
        cursor += code_prefix[pre0 + V];  // every code is present: read with its payload
    } else {
        for (int j0 = 0; j0 < V; j0 += 32) {
            if (subs[j0 >> 5] == 0) continue;  // no code in this chunk (warp-uniform)
            const int j = j0 + lane;
            u32 w = 0;
            if (j < V && ((subs[j >> 5] >> ((j & 31) >> 3)) & 1u)) {
                w = (u32)code_bits[col0 + j];
            }
            const u32 incl = warp_inclusive_scan(w, lane);
            // codes[j] is the lane's own: written here and read below by lane j % 32 only,
            // so no __syncwarp is needed between the two passes.
            if (j < V) codes[j] = (u8)read_bits(buf, cursor + incl - w, (int)w);
            cursor += __shfl_sync(FULL_MASK, incl, 31);
        }
    }
    if (cursor - base > (u32)(len * 8)) {  // the header and codes run past the row
        reject_corrupt_row<W>(out_row, error, p, V, row_bytes, word_aligned, lane);
        return;
    }
    // This cluster's tables, indexed by column. Indices into them are u32 (a cluster's
    // tables hold at most E * V words, and V is bounded by the codes' shared memory), so each
    // address is one multiply-add from its table's base.
    const W* __restrict__ entries = held(bitvals + (size_t)c * E * V);  // [e * V + j]
    const u32* __restrict__ cpre = held(code_prefix + pre0);
    const u32* __restrict__ fpre = held(free_prefix + pre0);
    const u32* __restrict__ layout_of = held(layouts + col0);
    const W* __restrict__ run_of = runs_from(runs, col0);
    // A flat row of more than two chunks, its output row 16-byte aligned: 16 bytes of words a
    // lane (a step of 128 columns costs about what two chunks do, so narrower rows do not). A
    // flat row of more than one chunk of 4-byte words, its output row 8-byte aligned: 8 bytes
    // a lane, 64 columns a step.
    if (WIDE_FLAT && !grouped && V > 64 && ((size_t)out_row & 15) == 0) {
        if (!decode_flat_spans<W, LaneWords<W>::value>(buf, code_at, cursor, base, len * 8,
                                                       entries, cpre, layout_of, run_of,
                                                       out_row, V, row_bytes, word_aligned,
                                                       lane)) {
            reject_corrupt_row<W>(out_row, error, p, V, row_bytes, word_aligned, lane);
        }
        return;
    }
    if constexpr (sizeof(W) == 4) {
        if (!grouped && V > 32 && ((size_t)out_row & 7) == 0) {
            if (!decode_flat_spans<W, 2>(buf, code_at, cursor, base, len * 8, entries, cpre,
                                         layout_of, run_of, out_row, V, row_bytes,
                                         word_aligned, lane)) {
                reject_corrupt_row<W>(out_row, error, p, V, row_bytes, word_aligned, lane);
            }
            return;
        }
    }
    const u32 uV = (u32)V;
    for (u32 j0 = 0; j0 < uV; j0 += 32) {
        const u32 j = j0 + (u32)lane;
        // A chunk of a grouped row with no code (warp-uniform): every code is 0. When its
        // columns have no free bit either, its words are their code-0 entries and it holds
        // no bits: one coalesced load a lane.
        const bool coded = !grouped || subs[j0 >> 5] != 0;
        if (!coded && ro(fpre, min(j0 + 32, uV)) == ro(fpre, j0)) {
            if (j < uV) store_word<W>(out_row, (int)j, ro(entries, j), row_bytes, word_aligned);
            continue;
        }
        u32 w = 0;
        u32 code = 0, esc = 0, layout = 0;
        if (j < uV) {
            layout = ro(layout_of, j);
            const int b = layout_code_width(layout);
            if (!grouped) {
                code = read_bits(buf, code_at + ro(cpre, j), b);
            } else if (coded) {
                code = codes[j];
            }
            esc = (1u << b) - 1u;
            w = code == esc ? (u32)TB : layout_free_bits(layout);
        }
        // No escaped word among these 32: the payloads sit at their columns' fixed places
        // (free-bit prefix sums); otherwise a warp scan of the widths places them.
        const unsigned escapes = __ballot_sync(FULL_MASK, j < uV && code == esc);
        u32 at, end;
        if (escapes == 0) {
            // One load a lane: the prefix just past its word (w = its free bits).
            const u32 next = ro(fpre, min(j + 1, uV));
            const u32 f0 = __shfl_sync(FULL_MASK, next - w, 0);
            at = cursor + (next - w) - f0;
            end = cursor + __shfl_sync(FULL_MASK, next, 31) - f0;
        } else {
            const u32 incl = warp_inclusive_scan(w, lane);
            at = cursor + incl - w;
            end = cursor + __shfl_sync(FULL_MASK, incl, 31);
        }
        if (end - base > (u32)(len * 8)) {  // warp-uniform: `end` is the warp's total
            reject_corrupt_row<W>(out_row, error, p, V, row_bytes, word_aligned, lane);
            return;
        }
        if (j < uV) {
            const W payload = read_word<W>(buf, at, (int)w);
            const W word = code == esc ? payload
                                       : (W)(ro(entries, code * uV + j) |
                                             deposit<W>(payload, layout, run_of, j));
            store_word<W>(out_row, (int)j, word, row_bytes, word_aligned);
        }
        cursor = end;
    }
}

// A located request's output row, by the whole warp: zeroed with its output position `p`
// recorded in `error[0]` (an id out of range), rejected (`reject_corrupt_row`: a row longer
// than the staging buffer) or decoded (`decode_row` of the row staged in `buf`, after a
// __syncwarp unless SYNCED: the caller synced the warp since the row was staged).
template <typename W, int U, bool WIDE_FLAT = true, bool SYNCED = false>
__device__ __forceinline__ void decode_request(const u32* buf, u8* codes, u8* subs,
                                               const Staged& s, const W* __restrict__ runs,
                                               const u8* __restrict__ code_bits,
                                               const W* __restrict__ bitvals,
                                               const u32* __restrict__ code_prefix,
                                               const u32* __restrict__ free_prefix,
                                               const u32* __restrict__ layouts, u8* out_row,
                                               int* error, i64 p, int V, int E, int row_bytes,
                                               bool word_aligned, int lane) {
    if (s.cluster == ROW_OUT_OF_RANGE) {
        if (lane == 0) record_first(&error[0], p);
        zero_row<W>(out_row, V, row_bytes, word_aligned, lane);
    } else if (s.cluster == ROW_TOO_LONG) {
        reject_corrupt_row<W>(out_row, error, p, V, row_bytes, word_aligned, lane);
    } else {
        if (!SYNCED) __syncwarp();  // the staged bytes (and zero words) of every lane are visible
        decode_row<W, U, WIDE_FLAT>(buf, codes, subs, s, runs, code_bits, bitvals, code_prefix,
                                    free_prefix, layouts, out_row, error, p, V, E, row_bytes,
                                    word_aligned, lane);
    }
}

// Whether neither half of the warp has a row to decode but one of a cluster whose columns have
// no free bit, grouped (decode_no_free_half): the cluster's free-bit total, the last of its
// free-bit prefix sums (`free_prefix`, V + 1 a cluster), is 0. Loaded for every lane's row
// (cluster 0's for a half without a cluster), so that no branch guards the load.
__device__ __forceinline__ bool no_free_pair(const u32* __restrict__ free_prefix,
                                             const Staged& s, bool active, bool grouped, int V) {
    const u32 total = ro(free_prefix, (u32)max(s.cluster, 0) * (u32)(V + 1) + (u32)V);
    return __ballot_sync(FULL_MASK, active && !(grouped && total == 0)) == 0;
}

// Rows of at most HALF_ROW_BYTES bytes of words (64 4-byte words, 32 8-byte ones) are decoded
// two a warp, one a half-warp of 16 lanes with 16 bytes of words each (fetch_decode_halves);
// in a table whose first cluster's columns have no free bit (bag-of-words tables), rows of at
// most NO_FREE_HALF_ROW_BYTES (128 4-byte words, 64 8-byte ones) too, grouped ones 32 bytes of
// words a lane.
#define HALF_ROW_BYTES 256
#define NO_FREE_HALF_ROW_BYTES 512

// A flat row of at most 16 K words (K = LaneWords) decoded by one half of the warp (`lane`'s
// bit 4 says which) while the other half decodes another: decode_flat_spans over 16 lanes.
// `s`: the staged row (in `buf`), of cluster `s.cluster`; `active` false: the half has no
// request and only takes part. A row whose codes or payloads run past its stored length is
// zeroed and output position `p` recorded in `error[1]`.
template <typename W>
__device__ void decode_flat_half(const u32* buf, const Staged& s, bool active, u8* out_row,
                                 int* error, i64 p, const W* __restrict__ runs,
                                 const W* __restrict__ bitvals,
                                 const u32* __restrict__ code_prefix,
                                 const u32* __restrict__ layouts, int V, int E, int row_bytes,
                                 bool word_aligned, int lane) {
    const int c = active ? s.cluster : 0;
    const u32 base = (u32)(s.start & 15ull) * 8u;
    const u64 len_bits = (u64)s.len * 8;
    const u32* __restrict__ cpre = code_prefix + (size_t)c * (V + 1);
    const u32 code_at = base + 1;  // the codes, past the row's flag bit
    const u32 cursor = code_at + ro(cpre, (u32)V);  // the payloads, past every code
    const bool live = active && (u64)(cursor - base) <= len_bits;
    const bool fits = decode_flat_spans<W, LaneWords<W>::value, 16>(
        buf, code_at, cursor, base, len_bits, held(bitvals + (size_t)c * E * V), cpre,
        held(layouts + (size_t)c * V), held(runs_from(runs, (size_t)c * V)), out_row, V, row_bytes,
        word_aligned, lane, live);
    if (active && !(live && fits)) {
        reject_corrupt_row<W, 16>(out_row, error, p, V, row_bytes, word_aligned, lane);
    }
}

// The code widths of a lane's K neighbouring columns j .. j + K - 1 (`widths` [j]), a byte
// each, K / 2 a register: `packed[h]` byte i holds column j + h K / 2 + i's, 0 for a column
// whose bit in `coded` is clear. One load of K bytes where they are aligned and all coded
// (`vec`), else a load a coded column.
template <int K>
__device__ __forceinline__ void lane_code_widths(const u8* __restrict__ widths, int j, u32 coded,
                                                 bool vec, u32 (&packed)[2]) {
    static_assert(K == 4 || K == 8, "4 or 8 widths");
    constexpr int H = K / 2;
    packed[0] = packed[1] = 0u;
    if (vec && coded == (1u << K) - 1u) {
        if constexpr (K == 8) {
            const uint2 v = ro(reinterpret_cast<const uint2*>(widths + j), 0u);
            packed[0] = v.x;
            packed[1] = v.y;
        } else {
            const u32 v = ro(reinterpret_cast<const u32*>(widths + j), 0u);
            packed[0] = v & 0xffffu;
            packed[1] = v >> 16;
        }
    } else {
#pragma unroll
        for (int i = 0; i < K; ++i) {
            if ((coded >> i) & 1u) packed[i / H] |= (u32)ro(widths, (u32)(j + i)) << (8 * (i % H));
        }
    }
}

// A grouped row of a cluster none of whose columns has a free bit (bag-of-words tables), of at
// most NO_FREE_HALF_ROW_BYTES bytes of words, decoded by one half of the warp while the other
// half decodes another, in one step: each of its 16 lanes takes K = 2 LaneWords neighbouring
// columns (32 bytes of words, all of one subgroup). The header's subgroup bits are held a
// chunk a lane (at most 16 chunks), not written to scratch; a scan of the lanes' code bits
// places each lane's codes, and its total is where the payloads start (no prefix sums read).
// Which of a lane's words escape comes first (one bit a word when every code is 1 bit wide,
// the common case, a warp vote says), then the lanes' escape counts place its payloads; then
// the lane decodes and stores its words 16 bytes at a time: code-0 entries, each word of
// another code its own entry, each escaped word its payload. Whether the step loads widths or
// payloads is voted over the whole warp, so the halves take the same branches round every
// shuffle; the counts that place codes and payloads are the half's own (its 16 bits of each
// vote). `s`: the staged row (in `buf`), of cluster `s.cluster`; `active` false: the half has
// no request and only takes part. A row whose header, codes or payloads run past its stored
// length is zeroed and output position `p` recorded in `error[1]`.
template <typename W>
__device__ void decode_no_free_half(const u32* buf, const Staged& s, bool active, u8* out_row,
                                    int* error, i64 p, const u8* __restrict__ code_bits,
                                    const W* __restrict__ bitvals, int V, int E, int row_bytes,
                                    bool word_aligned, int lane) {
    constexpr int H = LaneWords<W>::value;  // 16 bytes of words
    constexpr int K = 2 * H;
    const int TB = Word<W>::BITS;
    const int C = (V + 31) >> 5;  // at most 16
    const int c = active ? s.cluster : 0;
    const u32 base = (u32)(s.start & 15ull) * 8u;
    const u64 len_bits = (u64)s.len * 8;
    const int hl = lane & 15;     // the lane in its half
    const int half0 = lane & 16;  // the half's first lane
    const unsigned below = (1u << hl) - 1u;  // the half's lanes before this one
    // The header: lane hl holds chunk hl's subgroup bits (0 for a chunk without a code). Every
    // chunk before the last has 32 columns, so 4 subgroup bits where it has any.
    u32 w = 0;
    if (active && hl < C && read_bits(buf, base + 1 + hl, 1)) {
        w = (u32)((min(32, V - 32 * hl) + 7) >> 3);
    }
    const u32 before = 4u * (u32)__popc((__ballot_sync(FULL_MASK, w != 0) >> half0) & below);
    const u32 subs_at = base + 1 + (u32)C;
    const u32 sub = read_bits(buf, subs_at + before, (int)w);
    const u32 codes_at = subs_at + __shfl_sync(FULL_MASK, before + w, half0 + C - 1);
    bool live = active && (u64)(codes_at - base) <= len_bits;
    const int j = K * hl;  // the lane's first column
    u32 in_row = live ? lane_in_row<K>(j, V) : 0u;
    // Bit i: column j + i has a code (the bit of its subgroup, in its chunk's lane).
    const u32 chunk_sub = __shfl_sync(FULL_MASK, sub, half0 + min(j >> 5, C - 1));
    const u32 coded = in_row != 0 && ((chunk_sub >> ((j & 31) >> 3)) & 1u) ? in_row : 0u;
    // The lane's code widths, a byte each (0 for a column without a code), H a register; its
    // codes, two fields of at most 32 bits (H codes of at most 8 bits each); which escape.
    u32 packed[2] = {0u, 0u}, field[2] = {0u, 0u};
    u32 escaped = 0, payloads_at = 0;
    bool wide = false;  // some code is more than 1 bit wide (in the warp)
    if (__ballot_sync(FULL_MASK, coded != 0) != 0) {  // warp-uniform
        const u8* __restrict__ widths = code_bits + (size_t)c * V;
        lane_code_widths<K>(widths, j, coded, ((size_t)widths % K) == 0 && j + K <= V, packed);
        // The bits of a register's codes (at most 4 widths of at most 8 bits: no carry).
        u32 lo_bits = (packed[0] * 0x01010101u) >> 24;
        u32 lane_bits = lo_bits + ((packed[1] * 0x01010101u) >> 24);
        const u32 incl = warp_inclusive_scan<16>(lane_bits, lane);
        // The payloads follow the codes of every lane of the half.
        payloads_at = codes_at + __shfl_sync(FULL_MASK, incl, lane | 15);
        u32 at = codes_at + incl - lane_bits;
        if (live && (u64)(payloads_at - base) > len_bits) {
            live = false;  // uniform in the half: read and write nothing
            in_row = 0u;
            packed[0] = packed[1] = 0u;
            lo_bits = lane_bits = 0u;
            at = base;
        }
        field[0] = read_bits(buf, at, (int)lo_bits);
        field[1] = read_bits(buf, at + lo_bits, (int)(lane_bits - lo_bits));
        wide = __ballot_sync(FULL_MASK, ((packed[0] | packed[1]) & 0xfefefefeu) != 0) != 0;
        if (!wide) {
            // Every code 1 bit wide (a lane's coded columns are the first of its K): 1 is the
            // escape.
            escaped = field[0] | (field[1] << H);
        } else {
#pragma unroll
            for (int i = 0; i < K; ++i) {
                const int h = i / H, sh = 8 * (i % H);  // its register, its byte there
                const u32 wi = (packed[h] >> sh) & 255u;
                const u32 all = (1u << wi) - 1u;
                const u32 start = ((packed[h] * 0x01010100u) >> sh) & 255u;
                escaped |= (u32)(wi != 0 && ((field[h] >> start) & all) == all) << i;
            }
        }
        // A lane's payloads follow those of the half's lanes before it, placed by the lanes'
        // escape counts (0..K), a vote a bit of the count.
        if (__ballot_sync(FULL_MASK, escaped != 0) != 0) {
            const u32 mine = (u32)__popc(escaped);
            u32 rank = 0, total = 0;  // the half's escapes before this lane, and in all
#pragma unroll
            for (int b = 0; b < 4 && (1 << b) <= K; ++b) {
                if (b == 1 && __ballot_sync(FULL_MASK, mine > 1u) == 0) break;
                const unsigned e = (__ballot_sync(FULL_MASK, (mine >> b) & 1u) >> half0) & 0xffffu;
                rank += (u32)__popc(e & below) << b;
                total += (u32)__popc(e) << b;
            }
            if (live && (u64)(payloads_at + total * TB - base) > len_bits) {
                live = false;
                in_row = 0u;
                escaped = 0u;
            }
            payloads_at += rank * TB;
        }
    }
    // The words, 16 bytes at a time.
    const W* __restrict__ entries = held(bitvals + (size_t)c * E * V);  // [e * V + j]
    const bool vec_in = ((size_t)entries & 15) == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int jh = j + h * H;
        const u32 in_h = (in_row >> (h * H)) & ((1u << H) - 1u);
        if (in_h == 0) continue;
        W word[H];  // the code-0 entries
        if (vec_in && in_h == (1u << H) - 1u) {
            load_vector<W, H>(entries + jh, word);
        } else {
#pragma unroll
            for (int i = 0; i < H; ++i) {
                word[i] = (in_h >> i) & 1u ? ro(entries, (u32)(jh + i)) : W(0);
            }
        }
        if (wide) {  // a code other than 0 and the escape: its own entry
#pragma unroll
            for (int i = 0; i < H; ++i) {
                const int sh = 8 * i;
                const u32 all = (1u << ((packed[h] >> sh) & 255u)) - 1u;
                const u32 code = (field[h] >> (((packed[h] * 0x01010100u) >> sh) & 255u)) & all;
                if (code != 0 && code != all) word[i] = ro(entries, code * (u32)V + (u32)(jh + i));
            }
        }
#pragma unroll
        for (int i = 0; i < H; ++i) {
            if ((escaped >> (h * H + i)) & 1u) {
                word[i] = read_word<W>(buf, payloads_at, TB);
                payloads_at += TB;
            }
        }
        store_lane_words_any<W, H>(out_row, jh, in_h, word, row_bytes, word_aligned);
    }
    if (active && !live) {
        reject_corrupt_row<W, 16>(out_row, error, p, V, row_bytes, word_aligned, lane);
    }
}

// The one-buffer kernel's loop for rows of at most HALF_ROW_BYTES bytes of words, or of at
// most NO_FREE_HALF_ROW_BYTES in a table whose first cluster has no free bit
// (`no_free_table`): requests r and r + 1 a step, one a half-warp. Each half stages its row
// into its own buffer of the warp's two (16 lanes); when both rows are flat and stored
// compressed, of at most HALF_ROW_BYTES bytes of words (or one half has no request), each half
// decodes its own (decode_flat_half); in a `no_free_table`, when both are grouped rows of
// clusters without free bits, likewise (decode_no_free_half); else the whole warp takes them
// one after the other as the wider rows' loop does (out-of-range ids, rows too long, raw rows
// and the rest). Same arguments as fetch_decode. (One loop for both kinds of table: two copies
// of it, each with its own whole-warp decoder, spilled registers in every path.)
template <typename W, typename O>
__device__ void fetch_decode_halves(const u8* __restrict__ rows, const O* __restrict__ offsets,
                                    const u8* __restrict__ cluster_ids,
                                    const W* __restrict__ runs,
                                    const u8* __restrict__ code_bits,
                                    const W* __restrict__ bitvals,
                                    const u32* __restrict__ code_prefix,
                                    const u32* __restrict__ free_prefix,
                                    const u32* __restrict__ layouts,
                                    const i64* __restrict__ idx,
                                    const i64* __restrict__ out_pos, u8* __restrict__ out,
                                    int* __restrict__ error, i64 n, i64 num_rows, int V, int E,
                                    int align, int row_bytes, int buf_words, bool no_free_table) {
    IBP_DYNAMIC_SMEM(u32, smem);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const int C = (V + 31) >> 5;
    // The warp's 16-byte aligned share: two buffers, the codes and the subgroups.
    u32* buf = smem + (size_t)warp * ((2 * buf_words + ((V + C + 3) >> 2) + 3) & ~3);
    const i64 step = 2 * (i64)gridDim.x * warps;
    i64 r = 2 * ((i64)blockIdx.x * warps + warp);
    const int half = lane >> 4;
    u8* codes = reinterpret_cast<u8*>(buf + 2 * buf_words);
    u8* subs = codes + V;
    u32* mine = buf + half * buf_words;
    const bool word_aligned = (row_bytes == V * (int)sizeof(W));
    const u32 raw_bytes = (u32)(V * (int)sizeof(W));
    // The id of the half's next request, read while the current one is staged and decoded.
    i64 id1 = r + half < n ? idx[r + half] : -1;
    for (; r < n; r += step) {
        const i64 q = r + half;  // the half's request
        const bool active = q < n;
        const Staged s = locate_row(offsets, cluster_ids, id1, num_rows, align, buf_words);
        id1 = q + step < n ? idx[q + step] : -1;
        stage_row<false, 16>(rows, s, mine, lane & 15);
        const i64 p = active ? (out_pos ? out_pos[q] : q) : 0;  // the output row
        __syncwarp();  // the staged bytes (and zero words) of every lane are visible
        const bool coded = active && s.cluster >= 0 && s.len < raw_bytes;
        const bool grouped = coded && read_bits(mine, (u32)(s.start & 15ull) * 8u, 1) != 0;
        if (raw_bytes <= HALF_ROW_BYTES &&
            __ballot_sync(FULL_MASK, active && !(coded && !grouped)) == 0) {  // flat
            decode_flat_half<W>(mine, s, active, out + p * (i64)row_bytes, error, p, runs,
                                bitvals, code_prefix, layouts, V, E, row_bytes, word_aligned,
                                lane);
        } else if (no_free_table && no_free_pair(free_prefix, s, active, grouped, V)) {
            decode_no_free_half<W>(mine, s, active, out + p * (i64)row_bytes, error, p,
                                   code_bits, bitvals, V, E, row_bytes, word_aligned, lane);
        } else {
            for (int h = 0; h < 2; ++h) {
                const int from = 16 * h;
                if (!__shfl_sync(FULL_MASK, (int)active, from)) continue;  // warp-uniform
                Staged t;
                t.start = __shfl_sync(FULL_MASK, s.start, from);
                t.len = __shfl_sync(FULL_MASK, s.len, from);
                t.cluster = __shfl_sync(FULL_MASK, s.cluster, from);
                const i64 ph = __shfl_sync(FULL_MASK, p, from);
                decode_request<W, Code0Loads<W, 1>::value, false, true>(
                    buf + h * buf_words, codes, subs, t, runs, code_bits, bitvals, code_prefix,
                    free_prefix, layouts, out + ph * (i64)row_bytes, error, ph, V, E, row_bytes,
                    word_aligned, lane);
                __syncwarp();  // done with the scratch before the other row writes it
            }
        }
        __syncwarp();  // done with the buffers before they are written again
    }
}

// Shared memory per warp: BUFFERS staging buffers of `buf_words` (a multiple of 4) u32 of row
// bytes (two where fetch_decode_halves runs), then V code bytes and C subgroup bytes, rounded
// up to 16 bytes; the host sizes it (ibp_graph/kernels/fetch_decode.py, smem_plan). The row
// section must be readable up to 16 bytes past its end (the loader pads it).
//
// BUFFERS 1: each row is staged with plain loads, then decoded (rows two a warp, one a
// half-warp, run fetch_decode_halves instead). BUFFERS 2 (double buffering): a warp stages its
// next row with asynchronous copies before it decodes the current one, so the next row's
// reads (over PCIe) overlap the current row's decoding.
template <typename W, typename O, int BUFFERS>
__device__ void fetch_decode(const u8* __restrict__ rows, const O* __restrict__ offsets,
                             const u8* __restrict__ cluster_ids, const W* __restrict__ runs,
                             const u8* __restrict__ code_bits, const W* __restrict__ bitvals,
                             const u32* __restrict__ code_prefix,
                             const u32* __restrict__ free_prefix,
                             const u32* __restrict__ layouts, const i64* __restrict__ idx, const i64* __restrict__ out_pos,
                             u8* __restrict__ out, int* __restrict__ error, i64 n,
                             i64 num_rows, int V, int E, int align, int row_bytes,
                             int buf_words) {
    IBP_DYNAMIC_SMEM(u32, smem);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const int C = (V + 31) >> 5;
    // 16-byte aligned share of each warp.
    const int stride_words = (BUFFERS * buf_words + ((V + C + 3) >> 2) + 3) & ~3;
    u32* buf = smem + (size_t)warp * stride_words;
    u8* codes = reinterpret_cast<u8*>(buf + BUFFERS * buf_words);
    u8* subs = codes + V;
    const bool word_aligned = (row_bytes == V * (int)sizeof(W));
    const i64 step = (i64)gridDim.x * warps;
    i64 r = (i64)blockIdx.x * warps + warp;

    // BUFFERS 2 runs a software pipeline over the warp's requests r, r + step, ...: while
    // request r decodes, the copies of r + step are in flight (its offsets and cluster were
    // read one request earlier) and so are the offsets and cluster of r + 2 step (its id read
    // one request earlier) and the id of r + 3 step, so no dependent load waits between two
    // decodes. BUFFERS 1 reads the id of r + step while request r is staged and decoded
    // (`id1`), so a request waits for its offsets and cluster, then its row.
    Staged s = {0, 0, ROW_OUT_OF_RANGE}, s1 = {0, 0, ROW_OUT_OF_RANGE};
    i64 id2 = -1;
    i64 id1 = BUFFERS == 1 && r < n ? idx[r] : -1;
    if (BUFFERS == 2) {
        if (r < n) s = locate_row(offsets, cluster_ids, idx[r], num_rows, align, buf_words);
        if (r + step < n) {
            s1 = locate_row(offsets, cluster_ids, idx[r + step], num_rows, align, buf_words);
        }
        if (r + 2 * step < n) id2 = idx[r + 2 * step];
        stage_row<true>(rows, s, buf, lane);
        copy_async_commit();
    }
    for (int b = 0; r < n; r += step, b ^= (BUFFERS - 1)) {
        const u32* cur = buf + b * buf_words;
        Staged s2 = {0, 0, ROW_OUT_OF_RANGE};
        if (BUFFERS == 2) {
            // Stage the next request into the other buffer (the warp is done reading it: the
            // __syncwarp ending the last iteration) and read ahead, then wait for this row's
            // copies: every group but the one just committed.
            stage_row<true>(rows, s1, buf + (b ^ 1) * buf_words, lane);
            copy_async_commit();
            if (r + 2 * step < n) {
                s2 = locate_row(offsets, cluster_ids, id2, num_rows, align, buf_words);
            }
            id2 = r + 3 * step < n ? idx[r + 3 * step] : -1;
            copy_async_wait_one();
        } else {
            s = locate_row(offsets, cluster_ids, id1, num_rows, align, buf_words);
            id1 = r + step < n ? idx[r + step] : -1;
            stage_row<false>(rows, s, buf, lane);
        }
        const i64 p = out_pos ? out_pos[r] : r;  // the output row (the caller's position)
        decode_request<W, Code0Loads<W, BUFFERS>::value>(
            cur, codes, subs, s, runs, code_bits, bitvals, code_prefix, free_prefix, layouts,
            out + p * (i64)row_bytes, error, p, V, E, row_bytes, word_aligned, lane);
        __syncwarp();  // done with `cur` and the scratch before they are written again
        s = s1;
        s1 = s2;
    }
}
// The entry points. The one-buffer ones decode rows of at most HALF_ROW_BYTES bytes of words,
// and in a table whose first cluster has no free bit rows of at most NO_FREE_HALF_ROW_BYTES,
// two a warp (fetch_decode_halves: two staging buffers a warp, the host's plan says so:
// smem_plan's `no_free`, DeviceCodec.first_cluster_no_free). `masks` (the words' bits) is not
// read: `runs`, the last parameter, holds what deposit needs of them; the parameters before it
// are those of the decoders before the runs table, which the launcher can still launch.
#define IBP_FETCH_DECODE(NAME, W, O, BUFFERS)                                                \
    extern "C" __global__ void                                                               \
    __launch_bounds__(IBP_FETCH_THREADS, IBP_FETCH_MIN_BLOCKS) NAME(                         \
        const u8* __restrict__ rows, const O* __restrict__ offsets,                          \
        const u8* __restrict__ cluster_ids, const W* __restrict__ masks,                     \
        const u8* __restrict__ code_bits, const W* __restrict__ bitvals,                     \
        const u32* __restrict__ code_prefix, const u32* __restrict__ free_prefix,            \
        const u32* __restrict__ layouts, const i64* __restrict__ idx,                        \
        const i64* __restrict__ out_pos, u8* __restrict__ out, int* __restrict__ error,      \
        i64 n, i64 num_rows, int V, int E, int align, int row_bytes, int buf_words,          \
        const W* __restrict__ runs) {                                                        \
        const int words_bytes = V * (int)sizeof(W);                                          \
        const bool no_free_table =                                                           \
            BUFFERS == 1 && words_bytes <= NO_FREE_HALF_ROW_BYTES && free_prefix[V] == 0;    \
        if (BUFFERS == 1 && (words_bytes <= HALF_ROW_BYTES || no_free_table)) {              \
            fetch_decode_halves<W, O>(rows, offsets, cluster_ids, runs, code_bits, bitvals,  \
                                      code_prefix, free_prefix, layouts, idx, out_pos, out,  \
                                      error, n, num_rows, V, E, align, row_bytes, buf_words, \
                                      no_free_table);                                        \
        } else {                                                                             \
            fetch_decode<W, O, BUFFERS>(rows, offsets, cluster_ids, runs, code_bits,         \
                                        bitvals, code_prefix, free_prefix, layouts, idx,     \
                                        out_pos, out, error, n, num_rows, V, E, align,       \
                                        row_bytes, buf_words);                               \
        }                                                                                    \
    }

IBP_FETCH_DECODE(ibp_fetch_decode_w4_o4, u32, u32, 1)
IBP_FETCH_DECODE(ibp_fetch_decode_w4_o8, u32, u64, 1)
IBP_FETCH_DECODE(ibp_fetch_decode_w8_o4, u64, u32, 1)
IBP_FETCH_DECODE(ibp_fetch_decode_w8_o8, u64, u64, 1)
IBP_FETCH_DECODE(ibp_fetch_decode_db_w4_o4, u32, u32, 2)
IBP_FETCH_DECODE(ibp_fetch_decode_db_w4_o8, u32, u64, 2)
IBP_FETCH_DECODE(ibp_fetch_decode_db_w8_o4, u64, u32, 2)
IBP_FETCH_DECODE(ibp_fetch_decode_db_w8_o8, u64, u64, 2)
