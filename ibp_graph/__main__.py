"""``python -m ibp_graph``: the ``ibp-graph`` command line.

Usage::

    python -m ibp_graph compress features.npy -o features.ibp
    python -m ibp_graph inspect features.ibp
    python -m ibp_graph --version
    torchrun --nnodes 2 --nproc-per-node 4 -m ibp_graph train --config cora-sage
"""

import os
import sys

from .cli.main import main

if __name__ == "__main__":
    status = main()
    if "WORLD_SIZE" in os.environ and "TORCHELASTIC_RUN_ID" in os.environ:
        # A rank started by torch's launcher ends here, without the interpreter's teardown:
        # its results are written and flushed, and native exit handlers (DGL's CPU build
        # next to a gloo group) can otherwise abort a finished rank, which the launcher
        # then reports as failed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
