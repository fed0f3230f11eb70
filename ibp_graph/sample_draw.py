"""Uniform draws of neighbor offsets, vectorised over rows (one row per node to expand).

Every function takes a ``(rows,)`` int64 tensor of population sizes (in-degrees) and returns,
for every row, offsets into ``[0, deg)``, on ``deg``'s device, from a seeded torch generator:

- `floyd_sample`: ``k`` distinct offsets by Floyd's algorithm, ``k`` vectorised steps;
- `random_keys_sample`: ``k`` distinct offsets, the ``k`` smallest of one random key per entry;
- `replace_sample`: ``k`` offsets drawn independently (with replacement).

The first two draw every ``k``-subset with equal probability; all return each row's offsets
in ascending order.
"""

from __future__ import annotations

import torch

__all__ = ["floyd_sample", "random_keys_sample", "replace_sample"]

#: Random draws are 62-bit integers reduced modulo the range (bias < range / 2**62).
RANDOM_BITS = 62


def exclusive_cumsum(x: torch.Tensor) -> torch.Tensor:
    """``cumsum(x) - x``: the start of every segment of lengths ``x``."""
    return torch.cumsum(x, 0) - x


def randint(n: int, k: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """``(k, n)`` uniform 62-bit non-negative int64 draws (``randint(k, rows)``: ``(rows, k)``)."""
    return torch.randint(
        0, 2**RANDOM_BITS, (k, n), generator=generator, device=device, dtype=torch.int64
    )


def floyd_sample(deg: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """``k`` distinct offsets in ``[0, deg[i])`` per row, uniformly, by Floyd's algorithm.

    Step ``s`` draws ``t`` uniform in ``[0, j]`` with ``j = deg - k + s`` and keeps ``t``, or
    ``j`` if ``t`` was already taken; this yields every ``k``-subset with equal probability.
    The draws do not depend on what was taken, so every ``t`` is computed at once; the ``k - 1``
    vectorised steps after the first only check and replace (three torch ops each: on a GPU,
    three launches). ``O(rows * k^2)`` comparisons.

    Args:
        deg: ``(rows,)`` int64 population sizes, each ``> k``.
        k: sample size, ``>= 1``.
        generator: random source on ``deg``'s device.

    Returns:
        ``(rows, k)`` int64 offsets, ascending within each row.
    """
    rows = deg.numel()
    draws = randint(rows, k, generator, deg.device)  # (k, rows): step s's draws in row s
    top = torch.arange(k, device=deg.device).unsqueeze(1) + (deg - k)  # j of every step
    chosen = draws.remainder_(top + 1)  # every step's t; step s then keeps it, or j
    steps, tops = chosen.unbind(0), top.unbind(0)
    for s in range(1, k):
        taken = (chosen[:s] == steps[s]).any(dim=0)
        torch.where(taken, tops[s], steps[s], out=steps[s])
    return chosen.t().contiguous().sort(dim=1).values


def random_keys_sample(
    deg: torch.Tensor, k: int, generator: torch.Generator, total: int | None = None
) -> torch.Tensor:
    """``k`` distinct offsets in ``[0, deg[i])`` per row: the ``k`` smallest of random keys.

    Every entry of every row gets an independent uniform 62-bit key (ties, with probability
    about ``deg^2 / 2^63``, go to the lower offset); the ``k`` entries with the smallest keys
    form a uniform random ``k``-subset. Costs a sort of ``sum(deg)`` entries.

    Args:
        deg: ``(rows,)`` int64 population sizes, each ``> k``.
        k: sample size, ``>= 1``.
        generator: random source on ``deg``'s device.
        total: ``deg.sum()`` if already known (default: None, computed).

    Returns:
        ``(rows, k)`` int64 offsets, ascending within each row.
    """
    rows = deg.numel()
    if total is None:
        total = int(deg.sum())
    device = deg.device
    row = torch.repeat_interleave(torch.arange(rows, device=device), deg, output_size=total)
    offset = torch.arange(total, device=device) - exclusive_cumsum(deg)[row]
    keys = randint(total, 1, generator, device)[0]
    order = torch.sort(keys, stable=True).indices
    order = order[torch.sort(row[order], stable=True).indices]  # by row, then by key
    # After the sort, position p still belongs to row[p] with rank offset[p] in that row.
    picked = order[offset < k]
    return offset[picked].view(rows, k).sort(dim=1).values


def replace_sample(deg: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """``k`` offsets in ``[0, deg[i])`` per row, drawn independently (with replacement).

    Args:
        deg: ``(rows,)`` int64 population sizes, each ``>= 1``.
        k: draws per row, ``>= 1``.
        generator: random source on ``deg``'s device.

    Returns:
        ``(rows, k)`` int64 offsets, ascending within each row (repeats adjacent).
    """
    draws = randint(k, deg.numel(), generator, deg.device)  # (rows, k)
    return (draws % deg.unsqueeze(1)).sort(dim=1).values
