"""benchmarks/uva_reads.py: the sectors a warp's loads touch, counted by hand on small cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_graph

from benchmarks import uva_reads
from benchmarks.uva_reads import draw_sectors, sectors_per_load
from ibp_graph.graph import CSRGraph


def test_a_load_counts_each_sector_its_lanes_touch_once() -> None:
    loads = np.array([[0, 8, 31, 32, -1], [64, -1, -1, -1, -1], [-1, -1, -1, -1, -1]])
    assert sectors_per_load(loads) == 2 + 1 + 0
    assert sectors_per_load(np.zeros((0, 32), dtype=np.int64)) == 0


def test_draw_sectors_follow_each_load_pattern() -> None:
    # Two rows of fanout 2: row 0 took CSR positions 0 and 1, row 1 position 100 only.
    pos = np.array([0, 1, 100, -1])
    got = draw_sectors(np.array([5, 9]), pos, k=2, index_bytes=8)
    # indptr[5], indptr[6] in sector 1; indptr[9], indptr[10] in sector 2.
    assert got["indptr"] == 2
    # A lane per row: load 0 reads positions 0 and 100 (2 sectors), load 1 position 1 (1).
    assert got["indices_lane_per_row"] == 3
    # The warp's slots: one load reads positions 0, 1 and 100: sectors 0 and 25.
    assert got["indices_warp_slots"] == 2
    assert got["edge_ids"] == 2
    # Pairs: 16-byte entries, positions 0 and 1 in sector 0, 100 in sector 50.
    assert got["pairs"] == 2
    wide = draw_sectors(np.array([5, 9]), np.array([0, 2, 100, -1]), k=2, index_bytes=8)
    assert wide["indices_warp_slots"] == 2 and wide["pairs"] == 3  # 2 x 16 bytes: sector 1
    # 4-byte indices: position 100 is in sector 12, positions 0 and 1 in sector 0.
    assert draw_sectors(np.array([5, 9]), pos, k=2, index_bytes=4)["indices_warp_slots"] == 2


def test_rows_past_a_warp_and_unexpanded_rows() -> None:
    # 33 rows of fanout 1 at positions 0, 4, 8, ... (8-byte entries: a sector each 4 rows);
    # the last row is not expanded (its node -1, its slot unused).
    nodes = np.r_[np.arange(32), -1]
    pos = np.r_[np.arange(32) * 4, -1]
    got = draw_sectors(nodes, pos, k=1, index_bytes=8)
    assert got["indices_lane_per_row"] == got["indices_warp_slots"] == 32
    assert got["indptr"] == 9  # indptr[0 .. 32] spans sectors 0 .. 8; the -1 row reads none


def test_measure_counts_every_used_slot_of_a_batch(lib) -> None:
    g = CSRGraph.from_edge_index(random_graph(3, n=300, e=4000), num_nodes=300)
    seeds = [torch.arange(0, 40), torch.arange(100, 140)]
    got = uva_reads.measure(g, [4, 3], seeds, lib)
    assert len(got["hops"]) == 2
    total = got["total"]
    assert total["slots_used"] == got["edges_per_batch"]
    # A lane per row reads one sector per used slot; whole warps never need more.
    assert total["indices_lane_per_row"] == total["slots_used"]
    assert 0 < total["indices_warp_slots"] <= total["indices_lane_per_row"]
    assert got["hops"][0]["rows"] == 40
    # A batch's sectors by layout, every array over UVA first: each layout reads fewer.
    counts = [n for _, n in uva_reads.layouts(total, "int64")]
    assert counts == sorted(counts, reverse=True) and counts[-1] < counts[0]
    assert uva_reads.layouts(total, "int32")[-1][1] is None


def test_measure_refuses_a_pairs_graph(lib) -> None:
    g = CSRGraph.from_edge_index(random_graph(3, n=50, e=300), num_nodes=50)
    both = torch.stack([g.indices, g.edge_ids], 1)
    pairs = CSRGraph(g.indptr, both[:, 0], both[:, 1], g.num_nodes)
    with pytest.raises(ValueError, match="this one is pairs"):
        uva_reads.measure(pairs, [2], [torch.arange(5)], lib)
