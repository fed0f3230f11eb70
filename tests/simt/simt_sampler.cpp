// Host build of the sampler's kernels for tests/test_sampler_kernel_host.py and
// tests/test_sampler_hop_host.py (see simt_host.h).
#include "simt_host.h"

#include "../../cuda/sample_neighbors.cu"

extern "C" void simt_sample_neighbors(int cap, const void* deg, const void* key, void* out,
                                      long long rows, int k, unsigned grid, unsigned block) {
    auto d = static_cast<const i64*>(deg);
    auto ky = static_cast<const i64*>(key);
    auto o = static_cast<i64*>(out);
    simt_launch(grid, block, 0, [&] {
        if (cap == 32) ibp_sample_neighbors_k32(d, ky, o, rows, k);
        else ibp_sample_neighbors_k256(d, ky, o, rows, k);
    });
}

// The hop kernels (cuda/sample_neighbors.cu). cap: 32 or 256; index_bytes: 4 or 8, or 16 for
// pairs (64-bit indices each with its edge id, `IndexEdge`).
extern "C" void simt_hop_draw(int cap, int index_bytes, const void* indptr, const void* indices,
                              const void* frontier, const void* rows_at, const void* key,
                              void* local, void* nbr, void* pos, long long rows, int k,
                              int replace, unsigned grid, unsigned block) {
    auto ip = static_cast<const i64*>(indptr);
    auto f = static_cast<const i64*>(frontier);
    auto ra = static_cast<const i64*>(rows_at);
    auto ky = static_cast<const i64*>(key);
    auto lo = static_cast<long long*>(local);
    auto nb = static_cast<i64*>(nbr);
    auto ps = static_cast<i64*>(pos);
    auto i4 = static_cast<const int*>(indices);
    auto i8 = static_cast<const i64*>(indices);
    auto ie = static_cast<const IndexEdge*>(indices);
    simt_launch(grid, block, 0, [&] {
        if (cap == 32 && index_bytes == 4)
            ibp_hop_draw_k32_i32(ip, i4, f, ra, ky, lo, nb, ps, rows, k, replace);
        else if (cap == 32 && index_bytes == 8)
            ibp_hop_draw_k32_i64(ip, i8, f, ra, ky, lo, nb, ps, rows, k, replace);
        else if (cap == 32)
            ibp_hop_draw_k32_pairs(ip, ie, f, ra, ky, lo, nb, ps, rows, k, replace);
        else if (index_bytes == 4)
            ibp_hop_draw_k256_i32(ip, i4, f, ra, ky, lo, nb, ps, rows, k, replace);
        else if (index_bytes == 8)
            ibp_hop_draw_k256_i64(ip, i8, f, ra, ky, lo, nb, ps, rows, k, replace);
        else
            ibp_hop_draw_k256_pairs(ip, ie, f, ra, ky, lo, nb, ps, rows, k, replace);
    });
}

extern "C" void simt_hop_all(int index_bytes, const void* indptr, const void* indices,
                             const void* frontier, const void* slot_start, void* local,
                             void* nbr, void* pos, long long rows, unsigned grid,
                             unsigned block) {
    auto ip = static_cast<const i64*>(indptr);
    auto f = static_cast<const i64*>(frontier);
    auto ss = static_cast<const i64*>(slot_start);
    auto lo = static_cast<long long*>(local);
    auto nb = static_cast<i64*>(nbr);
    auto ps = static_cast<i64*>(pos);
    simt_launch(grid, block, 0, [&] {
        if (index_bytes == 4) ibp_hop_all_i32(ip, (const int*)indices, f, ss, lo, nb, ps, rows);
        else if (index_bytes == 8) ibp_hop_all_i64(ip, (const i64*)indices, f, ss, lo, nb, ps, rows);
        else ibp_hop_all_pairs(ip, (const IndexEdge*)indices, f, ss, lo, nb, ps, rows);
    });
}

extern "C" void simt_hop_flags(const void* nbr, const void* local, void* flags, long long slots,
                               unsigned grid, unsigned block) {
    simt_launch(grid, block, 0, [&] {
        ibp_hop_flags(static_cast<const i64*>(nbr), static_cast<const long long*>(local),
                      static_cast<i64*>(flags), slots);
    });
}

extern "C" void simt_hop_clear(const void* nodes, const void* counts, int at, void* local,
                               long long cap, unsigned grid, unsigned block) {
    simt_launch(grid, block, 0, [&] {
        ibp_hop_clear(static_cast<const i64*>(nodes), static_cast<const i64*>(counts), at,
                      static_cast<long long*>(local), cap);
    });
}

extern "C" void simt_hop_pack(const void* parts, int n_parts, const void* counts, int rows,
                              void* out, long long width, unsigned grid, unsigned block) {
    simt_launch(grid, block, 0, [&] {
        ibp_hop_pack(static_cast<const i64*>(parts), n_parts, static_cast<const i64*>(counts),
                     rows, static_cast<i64*>(out), width);
    });
}

extern "C" void simt_hop_emit(const void* nbr, const void* pos, const void* edge_ids,
                              const void* cum, const void* slot_start, void* local, void* fresh,
                              void* row, void* col, void* edge, void* counts, long long slots,
                              long long rows, int k, long long begin, long long end, int hop,
                              int hops, unsigned grid, unsigned block) {
    simt_launch(grid, block, 0, [&] {
        ibp_hop_emit(static_cast<const i64*>(nbr), static_cast<const i64*>(pos),
                     static_cast<const i64*>(edge_ids), static_cast<const i64*>(cum),
                     static_cast<const i64*>(slot_start), static_cast<long long*>(local),
                     static_cast<i64*>(fresh), static_cast<i64*>(row), static_cast<i64*>(col),
                     static_cast<i64*>(edge), static_cast<i64*>(counts), slots, rows, k, begin,
                     end, hop, hops);
    });
}
