"""Local ids of sampled nodes: the position of a node in the batch's ``node`` list.

Two structures give every key (a global node id, or a ``(seed, node)`` pair packed in one int64)
its local id, assigning the next free ids to keys seen for the first time, in order of first
occurrence:

- the dense map (`dense_seed`, `dense_insert`, `dense_clear`): one int64 per graph node, kept
  between batches and cleared after each; three random passes over the map per hop;
- `KeyIndex`: a sorted array of the keys seen, for keys from a range too large for a dense map
  (``disjoint=True``: the key of a node reached in the tree of seed ``b`` is ``b * N + node``).
"""

from __future__ import annotations

import torch

__all__ = ["KNOWN", "UNSEEN", "KeyIndex", "dense_clear", "dense_insert", "dense_seed"]

#: The dense map's value for a node not in the batch.
UNSEEN = torch.iinfo(torch.int64).max
#: A node with local id ``i`` is stored as ``i - KNOWN``: negative, below any position.
KNOWN = 2**62


def dense_seed(local: torch.Tensor, seeds: torch.Tensor, iota: torch.Tensor) -> None:
    """Enter the seeds into an empty dense map: a seed's local id is its first position.

    Args:
        local: the ``(num_nodes,)`` int64 map, all `UNSEEN`.
        seeds: global ids of the seeds, repeats allowed.
        iota: ``arange(n)`` for some ``n >= seeds.numel()``.
    """
    local.scatter_reduce_(0, seeds, iota[: seeds.numel()], "amin")
    local.index_copy_(0, seeds, local.index_select(0, seeds) - KNOWN)


def dense_insert(
    local: torch.Tensor, keys: torch.Tensor, end: int, iota: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Local ids of ``keys`` (global node ids), new ones numbered from ``end`` on.

    One ``amin`` scatter of every entry's position leaves, at each new node, the position of
    its first occurrence (known nodes hold values below every position and keep them); an entry
    that reads back its own position is a first occurrence, so the new nodes come out in order
    of discovery with one prefix sum.

    Args:
        local: the ``(num_nodes,)`` int64 map.
        keys: int64 global node ids, repeats allowed.
        end: the number of nodes already in the batch (the first new local id).
        iota: ``arange(n)`` for some ``n >= keys.numel()``.

    Returns:
        ``(loc, fresh)``: the local id of every entry of ``keys``, and the new nodes in order of
        discovery (local ids ``end, end + 1, ...``).
    """
    pos = iota[: keys.numel()]
    local.scatter_reduce_(0, keys, pos, "amin")
    seen = local.index_select(0, keys)
    first = seen == pos
    fresh = keys[first]
    new_id = torch.cumsum(first, 0).add_(end - 1)  # at a first occurrence: its new local id
    known = seen < 0
    loc = torch.where(known, seen + KNOWN, new_id.index_select(0, seen.masked_fill(known, 0)))
    local.index_copy_(0, fresh, iota[: fresh.numel()] + (end - KNOWN))
    return loc, fresh


def dense_clear(local: torch.Tensor, node: torch.Tensor) -> None:
    """Reset the entries of ``node`` to `UNSEEN`, leaving the map empty again."""
    local.index_fill_(0, node, UNSEEN)


class KeyIndex:
    """Local ids of distinct int64 keys, assigned in order of discovery (sorted-array lookup).

    Args:
        keys: the first keys, all distinct; ``keys[i]`` gets local id ``i``.
    """

    def __init__(self, keys: torch.Tensor) -> None:
        self.sorted, self.local = keys.sort()
        self.size = keys.numel()

    def insert(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Local ids of ``keys``, giving the ones not seen yet the next ids in order of discovery.

        Args:
            keys: int64 keys, repeats allowed.

        Returns:
            ``(local, fresh)``: the local id of every key, and the keys seen for the first time
            in the order of their first occurrence (their ids are ``size, size + 1, ...`` where
            ``size`` is the number of keys known before the call).
        """
        device = keys.device
        local = torch.full_like(keys, -1)
        if self.size:
            at = torch.searchsorted(self.sorted, keys).clamp_(max=self.size - 1)
            hit = self.sorted.index_select(0, at) == keys
            local = torch.where(hit, self.local.index_select(0, at), local)
            new = (~hit).nonzero().squeeze(1)
        else:
            new = torch.arange(keys.numel(), device=device)
        cand = keys.index_select(0, new)
        uniq, inverse = torch.unique(cand, return_inverse=True)
        first = torch.full_like(uniq, cand.numel()).scatter_reduce_(
            0, inverse, torch.arange(cand.numel(), device=device), "amin"
        )
        order = first.argsort()  # the unique keys in order of first occurrence
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel(), device=device)
        local[new] = self.size + rank.index_select(0, inverse)
        self.sorted, perm = torch.cat([self.sorted, uniq]).sort()
        self.local = torch.cat([self.local, self.size + rank]).index_select(0, perm)
        self.size += uniq.numel()
        return local, uniq.index_select(0, order)
