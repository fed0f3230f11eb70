"""Each rank's share of an epoch's seed order: DistributedSampler's rule, or DGL's blocks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ibp_graph.distributed import rank_block, rank_share, share_size
from ibp_graph.errors import IBPInputError


@given(n=st.integers(1, 200), world=st.integers(1, 9), drop_last=st.booleans())
def test_shares_are_equal_disjoint_and_cover_the_order(n, world, drop_last) -> None:
    order = torch.randperm(n, generator=torch.Generator().manual_seed(n))
    shares = [
        rank_share(order, rank=r, world_size=world, drop_last=drop_last) for r in range(world)
    ]
    size = share_size(n, world, drop_last=drop_last)
    assert all(s.numel() == size for s in shares)
    seen = torch.cat(shares).tolist()
    if drop_last:
        assert len(set(seen)) == len(seen) == world * (n // world)  # disjoint, tail cut
        assert set(seen) == set(order[: world * (n // world)].tolist())
    else:
        assert set(seen) == set(order.tolist())  # every seed, padded from the start
        assert len(seen) - len(set(seen)) == world * size - n
    # DistributedSampler's layout: rank r keeps positions r, r + world, ...
    assert shares[0][0] == order[0] if size else True


def test_padding_repeats_the_start_even_when_shorter_than_the_world() -> None:
    # [7, 8] padded to [7, 8, 7, 8, 7]: rank 3 gets the second 8, rank 4 the third 7
    assert rank_share(torch.tensor([7, 8]), rank=3, world_size=5).tolist() == [8]
    assert rank_share(torch.tensor([7, 8]), rank=4, world_size=5).tolist() == [7]
    assert [rank_share(torch.tensor([7]), rank=r, world_size=3).tolist() for r in range(3)] == [
        [7],
        [7],
        [7],
    ]
    assert rank_share(torch.tensor([7, 8]), rank=0, world_size=3, drop_last=True).numel() == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 2, "world_size": 2}, "rank must be an int in"),
        ({"rank": 0, "world_size": 0}, "world_size must be an int >= 1"),
        ({"rank": True, "world_size": 2}, "rank must be an int"),
    ],
)
def test_bad_rank_or_world_size_is_one_line(kwargs, match) -> None:
    with pytest.raises(IBPInputError, match=match):
        rank_share(torch.arange(4), **kwargs)


@pytest.mark.parametrize("share", [rank_share, rank_block])
def test_bad_order_is_one_line(share) -> None:
    with pytest.raises(IBPInputError, match="1-D tensor"):
        share(torch.zeros(2, 2), rank=0, world_size=1)
    with pytest.raises(IBPInputError, match="rank must be an int in"):
        share(torch.arange(4), rank=-1, world_size=2)
    empty = torch.zeros(0, dtype=torch.long)
    assert rank_share(empty, rank=1, world_size=2).numel() == 0  # nothing to share, no padding


@given(
    n=st.integers(1, 200),
    world=st.integers(1, 9),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
)
def test_blocks_are_contiguous_equal_and_cover_the_order(n, world, drop_last, shuffle) -> None:
    order = torch.randperm(n, generator=torch.Generator().manual_seed(n)) + 1000
    size = share_size(n, world, drop_last=drop_last)
    blocks = []
    for r in range(world):
        gen = torch.Generator().manual_seed(r) if shuffle else None
        block = rank_block(order, rank=r, world_size=world, drop_last=drop_last, generator=gen)
        assert block.numel() == size
        own = order[r * size : (r + 1) * size]  # DGL's rank r: positions [r * size, (r + 1) * size)
        if own.numel():
            # its own seeds, each once, then (the last block) its own seeds again
            assert sorted(block[: own.numel()].tolist()) == sorted(own.tolist())
            assert set(block.tolist()) == set(own.tolist())
            if not shuffle:
                assert torch.equal(block[: own.numel()], own)
        blocks.append(block)
    seen = torch.cat(blocks).tolist()
    if drop_last:
        assert len(set(seen)) == len(seen)  # disjoint, the tail cut
        if not shuffle:
            assert seen == order[: world * size].tolist()
    else:
        assert set(seen) == set(order.tolist())


def test_a_short_block_repeats_its_own_start_after_the_shuffle() -> None:
    order = torch.arange(10)
    assert rank_block(order, rank=3, world_size=4).tolist() == [9, 9, 9]
    assert rank_block(torch.arange(5), rank=1, world_size=2).tolist() == [3, 4, 3]
    gen = torch.Generator().manual_seed(3)
    block = rank_block(torch.arange(11), rank=1, world_size=2, generator=gen)
    assert sorted(block[:5].tolist()) == [6, 7, 8, 9, 10] and block[5] == block[0]
    # a rank past the end (more ranks than seeds) repeats the order from its start
    assert [rank_block(torch.arange(9), rank=3, world_size=4).tolist()] == [[0, 1, 2]]
    assert rank_block(torch.tensor([7, 8]), rank=0, world_size=3, drop_last=True).numel() == 0
