// Raw zero-copy gather: out[r] = table[idx[r]] for rows of `row_bytes` bytes, one warp per
// row, lanes moving VEC-byte vectors (the host picks the widest VEC that divides row_bytes
// and the pointers' alignment). The table may live in pinned host memory (read over UVA) or
// in device memory. Out-of-range ids are never read; error[0] gets 1 + the first bad position.
//
// Entry points (extern "C"): ibp_raw_gather_v{16,8,4,1}.

typedef unsigned char u8;
typedef long long i64;

template <typename V>
__device__ void raw_gather(const u8* __restrict__ table, const i64* __restrict__ idx,
                           u8* __restrict__ out, int* __restrict__ error, i64 n, i64 num_rows,
                           i64 row_bytes) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const i64 per_row = row_bytes / (i64)sizeof(V);
    for (i64 r = (i64)blockIdx.x * warps + warp; r < n; r += (i64)gridDim.x * warps) {
        const i64 row = idx[r];
        if (row < 0 || row >= num_rows) {
            if (lane == 0) atomicCAS(&error[0], 0, (int)min(r + 1, (i64)0x7fffffff));
            continue;
        }
        const V* src = reinterpret_cast<const V*>(table + row * row_bytes);
        V* dst = reinterpret_cast<V*>(out + r * row_bytes);
        for (i64 q = lane; q < per_row; q += 32) dst[q] = src[q];
    }
}

#define IBP_RAW_GATHER(NAME, V)                                                               \
    extern "C" __global__ void NAME(const u8* __restrict__ table, const i64* __restrict__ idx, \
                                    u8* __restrict__ out, int* __restrict__ error, i64 n,     \
                                    i64 num_rows, i64 row_bytes) {                            \
        raw_gather<V>(table, idx, out, error, n, num_rows, row_bytes);                        \
    }

IBP_RAW_GATHER(ibp_raw_gather_v16, uint4)
IBP_RAW_GATHER(ibp_raw_gather_v8, uint2)
IBP_RAW_GATHER(ibp_raw_gather_v4, unsigned int)
IBP_RAW_GATHER(ibp_raw_gather_v1, u8)
