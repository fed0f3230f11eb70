"""The progress bar of a long job (compressing, decompressing, filling pinned memory)."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def work_bar(
    total: int,
    desc: str,
    *,
    unit: str,
    show: bool | None,
    size: int | None = None,
    min_size: int = 0,
) -> tqdm:
    """A bar of ``total`` ``unit`` on stderr, gone once it is done.

    ``show``: always (True), never (False), or on a terminal (None), and then only for a job
    whose ``size`` (default ``total``) is at least ``min_size``: a small job is over before a
    bar would say anything.
    """
    if show is None and (total if size is None else size) < min_size:
        show = False
    return tqdm(
        total=total,
        unit=unit,
        unit_scale=True,
        desc=desc,
        disable=None if show is None else not show,
        file=sys.stderr,
        leave=False,
    )
