"""benchmarks/decode_loads.py: the fused decoder's metadata loads, counted on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ibp_graph
from benchmarks import decode_loads
from ibp_graph.bitops import bit_runs


def test_sectors_count_distinct_32_byte_sectors_of_active_lanes() -> None:
    lane = np.arange(32)
    all_on = np.ones(32, bool)
    assert decode_loads.sectors(4 * lane, all_on) == 4  # 128 contiguous bytes
    assert decode_loads.sectors(12 * lane, all_on) == 12  # 384 bytes, every sector once
    assert decode_loads.sectors(np.full(32, 100), all_on) == 1  # one word for every lane
    assert decode_loads.sectors(64 * lane, lane < 5) == 5
    assert decode_loads.sectors(4 * lane, np.zeros(32, bool)) == 0
    assert decode_loads.sectors(4 * lane + 16, all_on) == 5  # not sector-aligned


@pytest.fixture
def one_coded_chunk(tmp_path):
    """64 float32 columns (2 chunks): only column 3 is ever non-zero (1.0, in few rows)."""
    rng = np.random.default_rng(0)
    x = np.zeros((200, 64), np.float32)
    x[:, 3] = (rng.random(200) < 0.05).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    yield table, x
    table.close()


def test_counts_follow_the_kernels_loads_chunk_by_chunk(one_coded_chunk) -> None:
    table, x = one_coded_chunk
    params = table.params
    # One entry (0.0) a column, one code bit, no free bit: a 1.0 is stored whole (escaped).
    assert params.free_bits.max() == 0 and params.max_entries == 1
    ids = np.flatnonzero(x[:, 3])  # rows whose chunk 0 holds a code and chunk 1 does not
    r = decode_loads.lanes(table, x, ids)
    assert r.shape == (ids.size, 2) and r.grouped.all()
    assert r.empty[:, 1].all() and not r.empty[:, 0].any() and not r.free.any()
    before = decode_loads.count(r, "before")
    after = decode_loads.count(r, "after")
    n = ids.size
    # before, each chunk: code widths for the codes and again for the payloads, masks, the
    # free-bit prefix sums (not in chunk 0: it holds an escaped word), dictionaries.
    assert before.instructions == {
        "code_prefix": 0,
        "code_bits": 4 * n,
        "masks": 2 * n,
        "free_prefix": n,
        "bitvals": 2 * n,
    }
    # after: the row loads its cluster's free-bit total (0: no chunk needs its own look), and
    # chunk 1 its code-0 entries, nothing else.
    assert after.instructions == {
        "code_prefix": 0,
        "code_bits": 2 * n,
        "free_prefix": n,
        "bitvals": 2 * n,
        "masks": n,
    }
    # Chunk 0's codes: subgroup 0's 8 widths (1 sector); its payloads: 32 widths (1 sector).
    assert after.sectors["code_bits"] == 2 * n
    # 32 columns' entries, one a column: 128 contiguous bytes in either layout.
    assert after.sectors["bitvals"] == before.sectors["bitvals"] == 2 * 4 * n
    # Prefix sums 33..64 of chunk 1 span 5 sectors; the total is one word.
    assert before.sectors["free_prefix"] == 5 * n
    assert after.sectors["free_prefix"] == n


def test_one_pass_reads_no_masks_and_no_free_bit_prefix_sums(one_coded_chunk) -> None:
    table, x = one_coded_chunk
    ids = np.flatnonzero(x[:, 3])
    r = decode_loads.lanes(table, x, ids)
    assert decode_loads.one_pass_rows(r).all()  # grouped, and the cluster has no free bit
    one = decode_loads.count(r, "one_pass")
    n = ids.size
    # The cluster's free-bit total; in the pass summing the code widths, lane 0 (chunk 0,
    # subgroup 0 with codes) reads code prefix sums 8 and 0; chunk 0 loads its subgroup's 8
    # code widths and the entries of its 31 words that do not escape, chunk 1 its code-0
    # entries.
    assert one.instructions == {
        "code_prefix": 2 * n,
        "code_bits": n,
        "free_prefix": n,
        "bitvals": 2 * n,
        "masks": 0,
    }
    assert one.sectors == {
        "code_prefix": 2 * n,
        "code_bits": n,
        "free_prefix": n,
        "bitvals": 2 * 4 * n,
        "masks": 0,
    }
    after = decode_loads.count(r, "after")
    assert sum(one.sectors.values()) < sum(after.sectors.values())


def _code_width_pass_reference(sub: np.ndarray, v: int) -> tuple[int, int]:
    """Loads and sectors of the pass summing the code widths, row by row and subgroup by
    subgroup: ``sub`` ``(n, C, 4)`` subgroup bits, one cluster (prefix sums from address 0)."""
    loads = sectors = 0
    n, c, _ = sub.shape
    for i in range(n):
        for q0 in range(0, c, 32):
            for g in range(4):
                qs = [q for q in range(q0, min(q0 + 32, c)) if sub[i, q, g]]
                if not qs:
                    continue
                lo = [32 * q + 8 * g for q in qs]
                hi = [min(a + 8, v) for a in lo]
                loads += 2
                sectors += len({4 * a // 32 for a in hi}) + len({4 * a // 32 for a in lo})
    return loads, sectors


def test_one_pass_issues_fewer_loads_than_after_without_free_bits(tmp_path) -> None:
    rng = np.random.default_rng(5)
    x = (rng.random((300, 1100)) < 0.01).astype(np.float32)  # bag of words, 35 chunks
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    v = x.shape[1]
    assert table.params.free_bits.max() == 0
    r = decode_loads.lanes(table, x, np.arange(300))
    n, c = r.shape
    assert n == 300 and c == 35 and decode_loads.one_pass_rows(r).all()
    # A word has a non-zero code exactly where it is not 0.0.
    assert np.array_equal(r.code.reshape(n, -1)[:, :v] != 0, x != 0)
    after = decode_loads.count(r, "after")
    one = decode_loads.count(r, "one_pass")
    assert sum(one.instructions.values()) < sum(after.instructions.values())
    assert sum(one.sectors.values()) < sum(after.sectors.values())
    assert one.instructions["masks"] == one.sectors["masks"] == 0
    assert one.instructions["free_prefix"] == one.sectors["free_prefix"] == n  # once a row
    coded = int((~r.empty).sum())
    assert coded > 0
    assert one.instructions["code_bits"] == coded  # once per chunk with codes, not twice
    assert after.instructions["code_bits"] == 2 * coded
    assert one.instructions["bitvals"] == after.instructions["bitvals"] == n * c
    # The pass summing the code widths (two iterations: chunks 0..31, 32..34), from the
    # subgroup bits of the words themselves.
    padded = np.zeros((n, 32 * c), bool)
    padded[:, :v] = x != 0
    sub = padded.reshape(n, c, 4, 8).any(axis=-1)
    loads, sectors = _code_width_pass_reference(sub, v)
    assert loads > 0
    assert one.instructions["code_prefix"] == loads
    assert one.sectors["code_prefix"] == sectors
    assert after.instructions["code_prefix"] == 0
    table.close()


def test_one_pass_is_after_for_rows_of_clusters_with_free_bits(tmp_path) -> None:
    rng = np.random.default_rng(6)
    x = (rng.random((400, 96)) < 0.03).astype(np.float32)  # rows 0..199: no free bit
    x[200:] = 0
    x[200:, 50:60] = 1.5 + rng.random((200, 10), dtype=np.float32) * np.float32(2**-12)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1, clusters=2)
    r = decode_loads.lanes(table, x, np.arange(400))
    one_pass = decode_loads.one_pass_rows(r)[:, 0]
    assert r.grouped.all() and 0 < one_pass.sum() < 400  # both kinds of cluster
    free_ids, no_free_ids = np.flatnonzero(~one_pass), np.flatnonzero(one_pass)
    free = decode_loads.lanes(table, x, free_ids)
    no_free = decode_loads.lanes(table, x, no_free_ids)
    # Rows of the cluster with free bits load as in "after".
    assert decode_loads.count(free, "one_pass") == decode_loads.count(free, "after")
    # All rows: the sum of the two kinds, each counted on its own.
    both = decode_loads.count(r, "one_pass")
    a, b = decode_loads.count(free, "after"), decode_loads.count(no_free, "one_pass")
    for what in ("instructions", "sectors"):
        x_a, x_b = getattr(a, what), getattr(b, what)
        total = {k: x_a.get(k, 0) + x_b.get(k, 0) for k in {*x_a, *x_b}}
        assert getattr(both, what) == total
    assert sum(both.instructions.values()) < sum(
        decode_loads.count(r, "after").instructions.values()
    )
    table.close()


def test_with_free_bits_an_empty_chunk_reads_its_two_end_prefix_sums(tmp_path) -> None:
    rng = np.random.default_rng(3)
    x = np.zeros((300, 64), np.float32)
    x[:, 40] = 1.5 + rng.random(300, dtype=np.float32) * np.float32(2**-12)  # free bits
    x[:, 3] = (rng.random(300) < 0.05).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    assert table.params.free_bits[0, 40] > 0 and table.params.free_bits[0, :32].max() == 0
    ids = np.flatnonzero(x[:, 3] == 0)  # chunk 0 empty (no free bit), chunk 1 empty too
    r = decode_loads.lanes(table, x, ids)
    assert r.grouped.all() and r.empty.all() and r.cluster_free.all()
    assert r.free[:, 1].all() and not r.free[:, 0].any()
    after = decode_loads.count(r, "after")
    n = ids.size
    # The total, then both chunks' two ends; chunk 0 takes the shortcut, chunk 1 the full path
    # (no code: no codes pass), which reads its payloads' prefix sums too.
    assert after.instructions["free_prefix"] == n * (1 + 2 + 2 + 1)
    assert after.instructions["code_bits"] == after.instructions["masks"] == n
    assert after.instructions["bitvals"] == 2 * n
    assert decode_loads.count(r, "one_pass") == after  # the cluster has free bits
    table.close()


def test_code_major_dictionaries_read_fewer_sectors_with_several_entries(tmp_path) -> None:
    rng = np.random.default_rng(1)
    x = rng.choice(np.float32([0, 1, 2, 3, 4, 5, 6]), (300, 64))  # 7 values a column: E >= 7
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    assert table.params.max_entries >= 7
    r = decode_loads.lanes(table, x, np.arange(300))
    before = decode_loads.count(r, "before").sectors["bitvals"]
    after = decode_loads.count(r, "after").sectors["bitvals"]
    assert after < before
    table.close()


def test_a_flat_row_loads_its_code_widths_once(tmp_path) -> None:
    x = np.random.default_rng(4).standard_normal((200, 64)).astype(np.float32)  # dense
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    offsets = table.offsets.astype(np.int64) * table.align
    encoded = np.diff(offsets) < 64 * 4
    grouped = np.asarray(table.rows_section).view(np.uint8)[offsets[:-1]] & 1  # the G bit
    flat = np.flatnonzero(encoded & (grouped == 0))
    r = decode_loads.lanes(table, x, flat)
    n = r.shape[0]
    assert n > 100 and not r.grouped.any()
    before = decode_loads.count(r, "before").instructions
    after = decode_loads.count(r, "after").instructions
    assert before["code_bits"] == 2 * 2 * n and after["code_bits"] == 2 * n
    assert before["code_prefix"] == after["code_prefix"] == 2 * n
    assert decode_loads.count(r, "one_pass").instructions == after
    table.close()


def test_one_pass_is_after_on_a_dense_table(tmp_path) -> None:
    x = np.random.default_rng(7).standard_normal((300, 80)).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    assert table.params.free_bits.min() > 0
    r = decode_loads.lanes(table, x, np.arange(300))
    assert r.shape[0] > 100 and not decode_loads.one_pass_rows(r).any()
    after = decode_loads.count(r, "after")
    assert sum(after.instructions.values()) > 0
    assert decode_loads.count(r, "one_pass") == after


def _flat_dense(tmp_path):
    """A dense float32 table of 64 columns, and the ids of its flat encoded rows."""
    x = np.random.default_rng(4).standard_normal((200, 64)).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    offsets = table.offsets.astype(np.int64) * table.align
    encoded = np.diff(offsets) < 64 * 4
    grouped = np.asarray(table.rows_section).view(np.uint8)[offsets[:-1]] & 1  # the G bit
    return table, x, np.flatnonzero(encoded & (grouped == 0))


def test_layouts_load_one_word_a_column_instead_of_code_width_and_mask(tmp_path) -> None:
    table, x, flat = _flat_dense(tmp_path)
    # Every column's free bits form at most two runs (below the exponent's top bits, and
    # perhaps the sign).
    runs = bit_runs(~table.params.masks, 32)
    assert ((runs.mask != 0).sum(axis=0) <= 2).all() and table.params.free_bits.min() > 0
    r = decode_loads.lanes(table, x, flat)
    n = r.shape[0]
    assert n > 100 and not r.grouped.any() and r.two_runs.all()
    one = decode_loads.count(r, "one_pass")
    new = decode_loads.count(r, "layouts")
    # Each of the 2 chunks: 32 layout words (128 bytes: 4 sectors) instead of 32 code widths
    # (1 sector) and 32 masks (4 sectors); nothing else changes.
    assert one.instructions["code_bits"] == one.instructions["masks"] == 2 * n
    assert one.sectors["code_bits"] == 2 * n and one.sectors["masks"] == 2 * 4 * n
    assert new.instructions == {
        **one.instructions,
        "code_bits": 0,
        "masks": 0,
        "layouts": 2 * n,
    }
    assert new.sectors == {**one.sectors, "code_bits": 0, "masks": 0, "layouts": 2 * 4 * n}
    table.close()


def test_layouts_load_masks_only_for_free_bits_in_three_runs(tmp_path) -> None:
    rng = np.random.default_rng(8)
    n = 400
    x = rng.standard_normal((n, 64)).astype(np.float32)
    bits = x.view(np.uint32)
    # Columns 40 and 50 (chunk 1, lanes 8 and 18): exponent 127 and mantissa bits 10..19
    # fixed, so their free bits form three runs (0..9, 20..22, 31); every 10th row of column
    # 40, and every 15th of column 50, has other bits 10..19 (a different value in each), and
    # escapes.
    fixed = np.uint32(0x7F800000 | 0x3FF << 10)
    escaped = {}
    for j, every in ((40, 10), (50, 15)):
        rows = np.arange(n) % every == 0
        other = (0x2A5 ^ (1 + np.arange(n, dtype=np.uint32))) & 0x3FF
        bits[:, j] = rng.integers(0, 2**32, n, dtype=np.uint32) & ~fixed | 0x3F800000
        bits[:, j] |= np.where(rows, other, 0x2A5).astype(np.uint32) << 10
        escaped[j] = rows
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    params = table.params
    runs = (bit_runs(~params.masks, 32).mask != 0).sum(axis=0)[0]
    assert set(np.flatnonzero(runs > 2)) == {40, 50} and runs.max() == 3
    assert params.code_bits[0, [40, 50]].tolist() == [1, 1]  # one entry: 0x2A5 (and 127)
    r = decode_loads.lanes(table, x, np.arange(n))
    assert r.shape == (n, 2) and r.free.all()  # every chunk takes the full path
    assert not r.two_runs[:, 1, [8, 18]].any() and r.two_runs.sum() == n * (64 - 2)
    assert np.array_equal(r.escaped[:, 1, 8], escaped[40])
    assert np.array_equal(r.escaped[:, 1, 18], escaped[50])
    one = decode_loads.count(r, "one_pass")
    new = decode_loads.count(r, "layouts")
    # Chunk 1 issues a load of masks when column 40 or 50 does not escape; it reads the mask
    # of each that does not (4 * 40 and 4 * 50: sectors 5 and 6). Chunk 0 issues none.
    either = ~(escaped[40] & escaped[50])
    assert 0 < either.sum() < n
    assert new.instructions["masks"] == either.sum()
    assert new.sectors["masks"] == (~escaped[40]).sum() + (~escaped[50]).sum()
    # Every chunk: its layout words in place of the code widths loaded with its payloads.
    assert new.instructions["layouts"] == 2 * n and new.sectors["layouts"] == 2 * 4 * n
    assert one.instructions["code_bits"] - new.instructions["code_bits"] == 2 * n
    assert one.sectors["code_bits"] - new.sectors["code_bits"] == 2 * n
    for what in ("instructions", "sectors"):
        a, b = getattr(one, what), getattr(new, what)
        assert {k: a[k] for k in a.keys() - {"code_bits", "masks"}} == {
            k: b[k] for k in b.keys() - {"code_bits", "masks", "layouts"}
        }
    table.close()


def test_layouts_is_one_pass_on_rows_decoded_in_one_pass(tmp_path) -> None:
    rng = np.random.default_rng(5)
    x = (rng.random((300, 100)) < 0.02).astype(np.float32)  # no free bit anywhere
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1)
    r = decode_loads.lanes(table, x, np.arange(300))
    assert decode_loads.one_pass_rows(r).all()
    one = decode_loads.count(r, "one_pass")
    assert decode_loads.count(r, "layouts") == decode_loads.Loads(
        {**one.instructions, "layouts": 0}, {**one.sectors, "layouts": 0}
    )
    table.close()


def _one_a_chunk(tmp_path, cols: int, chunks: int):
    """200 rows of ``cols`` float32 columns, all 0 but for one 1.0 in each of the first
    ``chunks`` chunks of 32 columns (a different column from row to row): every column takes
    codes (0.0 is code 0, 1.0 another) and every row is grouped, its chunks' one subgroup with
    codes each."""
    x = np.zeros((200, cols), np.float32)
    for i in range(x.shape[0]):
        for q in range(chunks):
            x[i, 32 * q + (7 * i + 3 * q) % min(32, cols - 32 * q)] = 1
    table = ibp_graph.compress(x, tmp_path / f"t{cols}-{chunks}.ibp", align=1)
    params = table.params
    assert params.free_bits.max() == 0 and int(params.code_bits.min()) > 0
    return table, x


def test_spans_load_a_steps_entries_and_widths_once(tmp_path) -> None:
    """128 columns, every chunk holding codes, 512 B output rows (16-byte aligned): one step
    of 32 lanes of four words. It loads the code-0 entries (512 contiguous bytes: 16
    sectors), the code widths of the two lanes of each chunk's subgroup with codes (one
    sector a chunk), and, since some lane has a word of code 1, entry i of each lane's word
    i (four loads, the four words of code 1 active: one sector each)."""
    table, x = _one_a_chunk(tmp_path, 128, 4)
    n = x.shape[0]
    r = decode_loads.lanes(table, x, np.arange(n))
    assert decode_loads.one_pass_rows(r).all() and not r.empty.any() and not r.escaped.any()
    spans = decode_loads.count(r, "spans")
    layouts = decode_loads.count(r, "layouts")
    for name in ("code_prefix", "free_prefix"):  # before the pass, as in "layouts"
        assert spans.instructions[name] == layouts.instructions[name]
        assert spans.sectors[name] == layouts.sectors[name]
    assert spans.instructions["code_bits"] == n and spans.sectors["code_bits"] == 4 * n
    assert spans.instructions["bitvals"] == n + 4 * n
    assert spans.sectors["bitvals"] == 16 * n + 4 * n
    # "layouts": a load of widths and one of entries a chunk.
    assert layouts.instructions["code_bits"] == 4 * n and layouts.instructions["bitvals"] == 4 * n
    table.close()


def test_spans_leave_rows_of_few_coded_chunks_and_unaligned_rows_to_the_chunk_pass(
    tmp_path,
) -> None:
    """Rows of which fewer than half the chunks hold codes (1 of 4 here) load what they load
    in "layouts", and so do rows whose output is not 16-byte aligned (101 columns: 404 B
    rows; rows are taken as written at positions 0, 1, ..., so rows 1-3 of every 4)."""
    table, x = _one_a_chunk(tmp_path, 128, 1)
    r = decode_loads.lanes(table, x, np.arange(x.shape[0]))
    assert decode_loads.one_pass_rows(r).all()
    assert decode_loads.count(r, "spans") == decode_loads.count(r, "layouts")
    table.close()
    table, x = _one_a_chunk(tmp_path, 101, 4)
    r = decode_loads.lanes(table, x, np.arange(8))
    assert r.row_bytes == 404 and decode_loads.one_pass_rows(r).all()
    spans, layouts = decode_loads.count(r, "spans"), decode_loads.count(r, "layouts")
    # The difference is that of rows 0 and 4, each counted alone (at position 0: aligned).
    alone = [decode_loads.lanes(table, x, np.array([i])) for i in (0, 4)]
    for what in ("instructions", "sectors"):
        got, want = getattr(spans, what), getattr(layouts, what)
        diff = {k: got[k] - want[k] for k in got}
        assert any(diff.values())
        for one in alone:
            a_got = getattr(decode_loads.count(one, "spans"), what)
            a_want = getattr(decode_loads.count(one, "layouts"), what)
            diff = {k: diff[k] - (a_got[k] - a_want[k]) for k in diff}
        assert not any(diff.values())
    table.close()


def test_flat_spans_load_a_steps_layouts_and_code_prefix_once(tmp_path) -> None:
    """Flat rows of 128 float32 columns (512 B, so every output row 16-byte aligned): per row
    one load of the lanes' layout words (512 bytes: 16 sectors), one of their first columns'
    code prefixes, and four of entries (word i of every lane whose word does not escape); no
    free-bit prefix sums and, the free bits in two runs, no masks. "layouts" loads a layout
    word, a code prefix and entries for each of the four chunks."""
    x = np.random.default_rng(7).standard_normal((4096, 128)).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=4)
    r = decode_loads.lanes(table, x, np.arange(100))
    n = r.shape[0]
    valid = np.broadcast_to(r.valid, r.two_runs.shape)
    assert n > 50 and not r.grouped.any() and r.two_runs[valid].all()
    spans = decode_loads.count(r, "spans")
    layouts = decode_loads.count(r, "layouts")
    assert spans.instructions["layouts"] == n and spans.sectors["layouts"] == 16 * n
    assert spans.instructions["code_prefix"] == n
    assert spans.instructions["free_prefix"] == 0 and spans.instructions["masks"] == 0
    assert spans.instructions["bitvals"] == 4 * n
    assert layouts.instructions["layouts"] == 4 * n and layouts.instructions["code_prefix"] == 4 * n
    table.close()


def test_flat_rows_of_two_chunks_load_a_steps_layouts_8_bytes_a_lane(tmp_path) -> None:
    """Flat rows of 60 float32 columns (240 B: every output row 8-byte aligned): 8 bytes of
    words a lane, one step of 30 lanes: one load of the lanes' layout words (240 bytes: 8
    sectors), one of their code prefixes, two of entries (word 0 and word 1 of every lane
    whose word does not escape), no free-bit prefix sums; "layouts" loads a layout word and a
    code prefix for each of the two chunks."""
    x = np.random.default_rng(8).standard_normal((4096, 60)).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=4)
    r = decode_loads.lanes(table, x, np.arange(100))
    flat = ~r.grouped[:, 0]
    assert flat.sum() > 50 and r.v == 60 and r.row_bytes == 240
    assert (decode_loads.flat_span8_rows(r)[:, 0] == flat).all()
    assert not decode_loads.flat_span_rows(r).any()
    one = decode_loads.lanes(table, x, np.flatnonzero(flat))
    valid = np.broadcast_to(one.valid, one.two_runs.shape)
    assert one.two_runs[valid].all()
    n = one.shape[0]
    spans, layouts = decode_loads.count(one, "spans"), decode_loads.count(one, "layouts")
    assert spans.instructions["layouts"] == n and spans.sectors["layouts"] == 8 * n
    assert spans.instructions["code_prefix"] == n and spans.instructions["bitvals"] == 2 * n
    assert spans.instructions["free_prefix"] == 0 and spans.instructions["masks"] == 0
    assert layouts.instructions["layouts"] == 2 * n and layouts.instructions["code_prefix"] == 2 * n
    table.close()


def test_flat_rows_of_one_chunk_8_byte_words_and_unaligned_rows_keep_the_chunk_pass(
    tmp_path,
) -> None:
    """32 float32 columns (one chunk), 60 float32 columns in 8-byte words (30 words), and 61
    columns (244 B: only every other output row 8-byte aligned, and the others take the
    chunks)."""
    rng = np.random.default_rng(8)
    for width, word_bytes in ((32, 4), (60, 8)):
        x = rng.standard_normal((4096, width)).astype(np.float32)
        table = ibp_graph.compress(x, tmp_path / "t.ibp", align=4, word_bytes=word_bytes)
        r = decode_loads.lanes(table, x, np.arange(100))
        assert (~r.grouped).any() and r.v <= 32
        assert decode_loads.count(r, "spans") == decode_loads.count(r, "layouts")
        table.close()
    x = rng.standard_normal((4096, 61)).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "u.ibp", align=4)
    r = decode_loads.lanes(table, x, np.arange(100))
    taken = decode_loads.flat_span8_rows(r)[:, 0]
    flat = ~r.grouped[:, 0]
    assert (taken == (flat & (np.arange(r.shape[0]) % 2 == 0))).all() and (flat & ~taken).any()
    odd = decode_loads.lanes(table, x, np.arange(1, 100, 2))  # output rows 4 or 12 mod 16
    assert odd.row_bytes == 244 and not decode_loads.flat_span8_rows(odd)[1::2].any()
    table.close()


def test_wavefronts_count_the_distinct_words_of_the_busiest_bank() -> None:
    lane = np.arange(32)
    on = np.ones(32, bool)
    assert decode_loads.wavefronts(lane, on) == 1  # 32 words, 32 banks
    assert decode_loads.wavefronts(np.full(32, 7), on) == 1  # one word, shared
    assert decode_loads.wavefronts(32 * (lane % 3), on) == 3  # words 0, 32, 64: bank 0
    assert decode_loads.wavefronts(lane // 2, on) == 1  # pairs of lanes share a word
    assert decode_loads.wavefronts(32 * lane, lane < 4) == 4
    assert decode_loads.wavefronts(lane, np.zeros(32, bool)) == 0


def test_flat_shared_reads_count_two_loads_a_field(tmp_path) -> None:
    """Flat rows of 128 words: a chunk reads a code and a payload a lane (4 loads, 4 chunks);
    the 16-byte pass reads a lane's codes once and its 4 payloads (10 loads). A load takes at
    least one wavefront. Rows of 64 words or fewer are not counted."""
    x = np.random.default_rng(7).standard_normal((4096, 128)).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=4)
    r = decode_loads.lanes(table, x, np.arange(60))
    got = decode_loads.flat_shared_reads(r, table.params)
    n = int((~r.grouped).sum())
    assert got["rows"] == n > 30
    assert got["chunk_loads"] == 16 * n and got["span_loads"] == 10 * n
    assert got["chunk_wavefronts"] >= got["chunk_loads"]
    assert got["span_wavefronts"] >= got["span_loads"]
    table.close()
    x = np.random.default_rng(8).standard_normal((4096, 60)).astype(np.float32)
    table = ibp_graph.compress(x, tmp_path / "n.ibp", align=4)
    r = decode_loads.lanes(table, x, np.arange(60))
    assert decode_loads.flat_shared_reads(r, table.params)["rows"] == 0
    table.close()


def test_markdown_compares_each_version_with_the_one_before() -> None:
    got = decode_loads._compared([22.0, 18.0, 18.0, 16.0])
    assert got == "22 | 18 (1.22x fewer) | 18 (same) | 16 (1.12x fewer)"


def test_unknown_version_is_refused(one_coded_chunk) -> None:
    table, x = one_coded_chunk
    r = decode_loads.lanes(table, x, np.arange(10))
    with pytest.raises(ValueError, match="version must be one of"):
        decode_loads.count(r, "later")


def test_raw_rows_load_no_metadata(tmp_path) -> None:
    x = np.random.default_rng(2).integers(0, 2**32, (50, 16), dtype=np.uint32).view(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    r = decode_loads.lanes(table, x, np.arange(50))
    assert r.shape[0] == 0
    table.close()


def test_main_writes_every_version(tmp_path) -> None:
    decode_loads.main(["--no-real", "--rows", "64", "--out", str(tmp_path)])
    payload = json.loads((tmp_path / "decode-loads-cpu.json").read_text())
    names = [r["table"] for r in payload["results"]]
    assert names == [f"{k}-512B" for k in decode_loads.KINDS]
    sparse = payload["results"][names.index("sparse-5pct-512B")]
    assert sum(sparse["after"]["sectors"].values()) < sum(sparse["before"]["sectors"].values())
    assert sparse["rows_spans"] > 0  # most of its chunks hold codes; its rows are 512 B
    dense = payload["results"][names.index("dense-normal-512B")]
    encoded = dense["rows_counted"] - dense["rows_raw"]
    assert dense["rows_spans"] > encoded // 2  # flat rows of 128 words
    for r in payload["results"]:
        assert set(decode_loads.VERSIONS) <= r.keys() and "rows_one_pass" in r
        assert 0 <= r["rows_spans"] <= r["rows_counted"] - r["rows_raw"]
        assert 0 <= r["columns_many_runs"] <= r["columns"]
        if not r["rows_one_pass"]:
            assert r["one_pass"] == r["after"]
    md = (tmp_path / "decode-loads-cpu.md").read_text()
    assert "| sparse-5pct-512B |" in md
    head = next(line for line in md.splitlines() if line.startswith("| table |"))
    assert "loads/row before | after | one pass | layouts |" in head
    assert "dictionary sectors/row before | after | one pass | layouts |" in head
    width = head.count("|")
    main_table = md.split("\n\n| table | flat rows |")[0]
    rows = [line for line in main_table.splitlines() if line.startswith("| ") and "-512B" in line]
    assert len(rows) == len(names) and all(line.count("|") == width for line in rows)
    # The flat rows' shared-memory reads: a row for each table with flat rows of 128 words.
    shared = md.split("| table | flat rows |")[1]
    assert "| dense-normal-512B |" in shared


def test_rows_must_be_positive(capsys) -> None:
    with pytest.raises(SystemExit):
        decode_loads.parse_args(["--rows", "0"])
    assert "--rows must be at least 1, got 0" in capsys.readouterr().err


def test_rows_of_a_later_cluster_address_past_the_first_256_bytes(tmp_path) -> None:
    """The table stores cluster ids as uint8; the model's addresses must not wrap with them."""
    rng = np.random.default_rng(6)
    x = (rng.random((400, 96)) < 0.03).astype(np.float32)
    x[200:] = 0  # a second cluster
    x[200:, 50:60] = 1.5 + rng.random((200, 10), dtype=np.float32) * np.float32(2**-12)
    table = ibp_graph.compress(x, tmp_path / "t.ibp", align=1, clusters=2)
    assert table.cluster_ids.dtype == np.uint8 and table.cluster_ids.max() == 1
    r = decode_loads.lanes(table, x, np.arange(400))
    # The (k, V + 1) prefix sums: cluster 1's row starts at word V + 1, its end at 2 V + 1.
    pre = r.cluster * (r.v + 1)
    assert 4 * (pre.max() + r.v) == 4 * (2 * r.v + 1) > 255
    table.close()
