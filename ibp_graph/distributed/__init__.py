"""Data-parallel training on torch.distributed, with one copy of the table per host.

Each concern is one module:

- `ibp_graph.distributed.shard`: each rank's share of an epoch's seed order
  (``DistributedSampler``'s semantics, or DGL's contiguous blocks);
- `ibp_graph.distributed.shm`: POSIX shared-memory segments (create, attach, cleanup on any
  exit) and the ``/dev/shm`` / locked-memory checks;
- `ibp_graph.distributed.shared_table`, `ibp_graph.distributed.shared_graph` and
  `ibp_graph.distributed.shared_dataset`: a compressed table's rows, a CSR graph and a
  dataset's tensors (those the ranks read) laid out in a segment;
- `ibp_graph.distributed.host`: local rank 0 fills the host's segment, the others attach;
- `ibp_graph.distributed.ddp`: the process group, this rank's device, reductions, and a
  clear error when another rank fails;
- `ibp_graph.distributed.launch`: ``ibp-graph train --nproc-per-node N`` through torch's
  launcher;
- `ibp_graph.distributed.orphan`: a rank stops when its launcher is gone (even killed with
  SIGKILL) instead of training on as an orphan.

Only `shard` is imported here; the others load torch.distributed when imported.
"""

from .shard import rank_block, rank_share, share_size

__all__ = ["rank_block", "rank_share", "share_size"]
