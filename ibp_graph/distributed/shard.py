"""Each rank's share of an epoch's seed order: torch's DistributedSampler's, or DGL's.

`rank_share` (the PyG loader's, torch's ``DistributedSampler`` semantics): every rank
computes the same epoch order (the loaders derive it from the shared base seed and the
epoch), then keeps every ``world_size``-th position starting at its ``rank``. Without
``drop_last`` the order is first padded by repeating its beginning until its length divides by
``world_size`` (so a few seeds are seen twice per epoch); with ``drop_last`` its tail is cut
instead (so up to ``world_size - 1`` seeds are not seen that epoch). Either way every rank gets
the same number of seeds, hence the same number of batches, and the shares of all ranks are
disjoint (up to the padding) and together cover the order.

`rank_block` (the DGL loader's, as DGL 2.1's ``DataLoader(use_ddp=True)``): rank ``r`` keeps
the ``r``-th contiguous block of the order, of the same size as `rank_share`'s share, shuffled
within itself when asked; a block cut short by the order's end is padded with its own first
positions. So every epoch each rank sees the same seeds, and without shuffling a contiguous
run of them (what layer-wise inference writing ``y[out[0]:out[-1] + 1]`` relies on).
"""

from __future__ import annotations

import torch

from ..errors import IBPInputError, check_int

__all__ = ["rank_block", "rank_share", "share_size"]


def _check(rank: object, world_size: object) -> tuple[int, int]:
    world_size = check_int("world_size", world_size, 1)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise IBPInputError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    return rank, world_size


def share_size(n: int, world_size: int, *, drop_last: bool = False) -> int:
    """How many of ``n`` seeds each of ``world_size`` ranks gets.

    Args:
        n: seeds in the epoch's order.
        world_size: ranks sharing them.
        drop_last: cut the order's tail instead of padding it (default: False).

    Raises:
        IBPInputError: ``world_size`` is not an int >= 1.
    """
    _check(0, world_size)
    return n // world_size if drop_last else -(-n // world_size)


def _check_order(order: object) -> torch.Tensor:
    if not isinstance(order, torch.Tensor) or order.dim() != 1:
        raise IBPInputError(
            f"order must be a 1-D tensor, got {getattr(order, 'shape', type(order).__name__)}"
        )
    return order


def rank_share(
    order: torch.Tensor, *, rank: int, world_size: int, drop_last: bool = False
) -> torch.Tensor:
    """The positions of ``order`` (a 1-D tensor, the same on every rank) that ``rank`` keeps.

    Example:
        >>> rank_share(torch.arange(5), rank=1, world_size=2).tolist()
        [1, 3, 0]
        >>> rank_share(torch.arange(5), rank=1, world_size=2, drop_last=True).tolist()
        [1, 3]

    Raises:
        IBPInputError: ``rank`` or ``world_size`` is out of range, or ``order`` is not 1-D.
    """
    rank, world_size = _check(rank, world_size)
    n = _check_order(order).numel()
    total = share_size(n, world_size, drop_last=drop_last) * world_size
    if total > n:  # n >= 1 here: an empty order needs no padding
        reps = -(-(total - n) // n)
        order = torch.cat([order, order.repeat(reps)[: total - n]])
    return order[rank:total:world_size]


def rank_block(
    order: torch.Tensor,
    *,
    rank: int,
    world_size: int,
    drop_last: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The contiguous block of ``order`` (a 1-D tensor, the same on every rank) ``rank`` keeps.

    Blocks are `share_size` long. A block that runs past the end of ``order`` is padded by
    repeating its own positions from its start (after the shuffle), and one that starts past
    the end (more ranks than seeds) by repeating ``order`` from its start.

    Example:
        >>> rank_block(torch.arange(5), rank=0, world_size=2).tolist()
        [0, 1, 2]
        >>> rank_block(torch.arange(5), rank=1, world_size=2).tolist()
        [3, 4, 3]
        >>> rank_block(torch.arange(5), rank=1, world_size=2, drop_last=True).tolist()
        [2, 3]

    Args:
        order: the epoch's order.
        rank: this rank.
        world_size: the number of ranks.
        drop_last: blocks of ``len(order) // world_size`` (the tail is not seen that epoch)
            instead of ``ceil(len(order) / world_size)`` (default: False).
        generator: shuffle the block with it before padding (default: None, no shuffle).

    Raises:
        IBPInputError: ``rank`` or ``world_size`` is out of range, or ``order`` is not 1-D.
    """
    rank, world_size = _check(rank, world_size)
    n = _check_order(order).numel()
    size = share_size(n, world_size, drop_last=drop_last)
    block = order[rank * size : (rank + 1) * size]
    if generator is not None and block.numel() > 1:
        block = block[torch.randperm(block.numel(), generator=generator)]
    if block.numel() < size:
        pad = block if block.numel() else order
        block = torch.cat([block, pad.repeat(-(-size // pad.numel()))[: size - block.numel()]])
    return block
