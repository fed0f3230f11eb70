// Host build of the feature kernels for tests/test_kernels_host.py (see simt_host.h).
#include "simt_host.h"

#include "../../cuda/fetch_decode.cu"
#include "../../cuda/raw_gather.cu"

extern "C" void simt_fetch_decode(int word_bytes, int offset_bytes, const void* rows,
                                  const void* offsets, const void* cluster_ids,
                                  const void* masks, const void* code_bits,
                                  const void* bitvals, const void* code_prefix,
                                  const void* free_prefix, const void* idx,
                                  const void* out_pos, void* out, int* error, long long n,
                                  long long num_rows, int V, int E, int align, int row_bytes,
                                  int buf_words, unsigned grid, unsigned block,
                                  unsigned long long shared) {
    auto r = static_cast<const u8*>(rows);
    auto cid = static_cast<const u8*>(cluster_ids);
    auto cb = static_cast<const u8*>(code_bits);
    auto ix = static_cast<const i64*>(idx);
    auto op = static_cast<const i64*>(out_pos);  // null: identity
    auto o = static_cast<u8*>(out);
    auto cp = static_cast<const u32*>(code_prefix);
    auto fp = static_cast<const u32*>(free_prefix);
    simt_launch(grid, block, shared, [&] {
        if (word_bytes == 4 && offset_bytes == 4)
            ibp_fetch_decode_w4_o4(r, (const u32*)offsets, cid, (const u32*)masks, cb,
                                   (const u32*)bitvals, cp, fp, ix, op, o, error, n, num_rows, V,
                                   E, align, row_bytes, buf_words);
        else if (word_bytes == 4)
            ibp_fetch_decode_w4_o8(r, (const u64*)offsets, cid, (const u32*)masks, cb,
                                   (const u32*)bitvals, cp, fp, ix, op, o, error, n, num_rows, V,
                                   E, align, row_bytes, buf_words);
        else if (offset_bytes == 4)
            ibp_fetch_decode_w8_o4(r, (const u32*)offsets, cid, (const u64*)masks, cb,
                                   (const u64*)bitvals, cp, fp, ix, op, o, error, n, num_rows, V,
                                   E, align, row_bytes, buf_words);
        else
            ibp_fetch_decode_w8_o8(r, (const u64*)offsets, cid, (const u64*)masks, cb,
                                   (const u64*)bitvals, cp, fp, ix, op, o, error, n, num_rows, V,
                                   E, align, row_bytes, buf_words);
    });
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
