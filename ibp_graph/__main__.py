"""``python -m ibp_graph``: the ``ibp-graph`` command line.

Usage::

    python -m ibp_graph compress features.npy -o features.ibp
    python -m ibp_graph inspect features.ibp
    python -m ibp_graph --version
"""

import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())
