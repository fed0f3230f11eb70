// Host build of the feature kernels for tests/test_kernels_host.py (see simt_host.h).
#include "simt_host.h"

#include "../../cuda/fetch_decode.cu"
#include "../../cuda/raw_gather.cu"

// Copies of the double-buffered kernel: at once (1) or when waited for (0, the default).
extern "C" void simt_set_copy_at_issue(int at_issue) { simt_copy_at_issue = at_issue != 0; }

// buffers: 1 (ibp_fetch_decode_*) or 2 (ibp_fetch_decode_db_*).
extern "C" void simt_fetch_decode(int buffers, int word_bytes, int offset_bytes, const void* rows,
                                  const void* offsets, const void* cluster_ids,
                                  const void* masks, const void* code_bits,
                                  const void* bitvals, const void* code_prefix,
                                  const void* free_prefix, const void* layouts, const void* idx,
                                  const void* out_pos, void* out, int* error, long long n,
                                  long long num_rows, int V, int E, int align, int row_bytes,
                                  int buf_words, const void* runs, unsigned grid,
                                  unsigned block,
                                  unsigned long long shared) {
    auto r = static_cast<const u8*>(rows);
    auto cid = static_cast<const u8*>(cluster_ids);
    auto cb = static_cast<const u8*>(code_bits);
    auto ix = static_cast<const i64*>(idx);
    auto op = static_cast<const i64*>(out_pos);  // null: identity
    auto o = static_cast<u8*>(out);
    auto cp = static_cast<const u32*>(code_prefix);
    auto fp = static_cast<const u32*>(free_prefix);
    auto lay = static_cast<const u32*>(layouts);
#define IBP_SIMT_FETCH(NAME, W, O)                                                           \
    NAME(r, (const O*)offsets, cid, (const W*)masks, cb, (const W*)bitvals, cp, fp, lay, ix, op, \
         o, error, n, num_rows, V, E, align, row_bytes, buf_words, (const W*)runs)
    simt_launch(grid, block, shared, [&] {
        const int variant = (buffers == 2 ? 4 : 0) + (word_bytes == 8 ? 2 : 0) +
                            (offset_bytes == 8 ? 1 : 0);
        switch (variant) {
            case 0: IBP_SIMT_FETCH(ibp_fetch_decode_w4_o4, u32, u32); break;
            case 1: IBP_SIMT_FETCH(ibp_fetch_decode_w4_o8, u32, u64); break;
            case 2: IBP_SIMT_FETCH(ibp_fetch_decode_w8_o4, u64, u32); break;
            case 3: IBP_SIMT_FETCH(ibp_fetch_decode_w8_o8, u64, u64); break;
            case 4: IBP_SIMT_FETCH(ibp_fetch_decode_db_w4_o4, u32, u32); break;
            case 5: IBP_SIMT_FETCH(ibp_fetch_decode_db_w4_o8, u32, u64); break;
            case 6: IBP_SIMT_FETCH(ibp_fetch_decode_db_w8_o4, u64, u32); break;
            default: IBP_SIMT_FETCH(ibp_fetch_decode_db_w8_o8, u64, u64); break;
        }
    });
#undef IBP_SIMT_FETCH
}

// vec: 16, 8, 4, 2 or 1 (the vector entry points), 0 for ibp_raw_gather_lines; out_pos may
// be null (identity).
extern "C" void simt_raw_gather(int vec, const void* table, const void* idx, const void* out_pos,
                                void* out, int* error, long long n, long long num_rows,
                                long long row_bytes, unsigned grid, unsigned block) {
    auto t = static_cast<const u8*>(table);
    auto ix = static_cast<const i64*>(idx);
    auto op = static_cast<const i64*>(out_pos);
    auto o = static_cast<u8*>(out);
    simt_launch(grid, block, 0, [&] {
        if (vec == 0) ibp_raw_gather_lines(t, ix, op, o, error, n, num_rows, row_bytes);
        else if (vec == 16) ibp_raw_gather_v16(t, ix, op, o, error, n, num_rows, row_bytes);
        else if (vec == 8) ibp_raw_gather_v8(t, ix, op, o, error, n, num_rows, row_bytes);
        else if (vec == 4) ibp_raw_gather_v4(t, ix, op, o, error, n, num_rows, row_bytes);
        else if (vec == 2) ibp_raw_gather_v2(t, ix, op, o, error, n, num_rows, row_bytes);
        else ibp_raw_gather_v1(t, ix, op, o, error, n, num_rows, row_bytes);
    });
}
