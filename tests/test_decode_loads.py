"""benchmarks/decode_loads.py: the fused decoder's metadata loads, counted on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ibp_graph
from benchmarks import decode_loads


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
    table.close()


def test_raw_rows_load_no_metadata(tmp_path) -> None:
    x = np.random.default_rng(2).integers(0, 2**32, (50, 16), dtype=np.uint32).view(np.float32)
    table = ibp_graph.compress(x, tmp_path / "t.ibp")
    r = decode_loads.lanes(table, x, np.arange(50))
    assert r.shape[0] == 0
    table.close()


def test_main_writes_both_results(tmp_path) -> None:
    decode_loads.main(["--no-real", "--rows", "64", "--out", str(tmp_path)])
    payload = json.loads((tmp_path / "decode-loads-cpu.json").read_text())
    names = [r["table"] for r in payload["results"]]
    assert names == [f"{k}-512B" for k in decode_loads.KINDS]
    sparse = payload["results"][names.index("sparse-5pct-512B")]
    assert sum(sparse["after"]["sectors"].values()) < sum(sparse["before"]["sectors"].values())
    md = (tmp_path / "decode-loads-cpu.md").read_text()
    assert "| sparse-5pct-512B |" in md


def test_rows_must_be_positive(capsys) -> None:
    with pytest.raises(SystemExit):
        decode_loads.parse_args(["--rows", "0"])
    assert "--rows must be at least 1, got 0" in capsys.readouterr().err
