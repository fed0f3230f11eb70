"""Regenerate the golden files of format version 1 (run only when the format version changes).

Usage::

    .venv/bin/python tests/golden/make_golden.py

Writes ``v1-*.ibp`` and the arrays they hold (``v1-*.npy``) beside this script. The committed
files pin the on-disk format: tests decode them and compare with the arrays.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import ibp_graph

HERE = Path(__file__).resolve().parent


def mixed_float32() -> np.ndarray:
    """400 x 37 float32: sparse rows, dense rows, special values, two populations."""
    rng = np.random.default_rng(2024)
    x = np.zeros((400, 37), dtype=np.float32)
    x[:200] = (rng.random((200, 37)) < 0.1).astype(np.float32)
    x[200:] = rng.standard_normal((200, 37)).astype(np.float32) * np.float32(1e30)
    x[3, 5] = np.uint32(0x7FC12345).view(np.float32)  # NaN with a payload
    x[4, 6] = -0.0
    x[5, 7] = np.uint32(1).view(np.float32)  # smallest subnormal
    x[6] = np.frombuffer(rng.bytes(37 * 4), dtype=np.float32)  # random bits: stored raw
    return x


def small_int16() -> np.ndarray:
    """7 x 3 int16 (odd width: padded in the encoded domain)."""
    return np.array(
        [[0, 1, 2], [0, 1, 3], [-1, 1, 2], [0, 1, 2], [7, -32768, 32767], [0, 1, 2], [0, 0, 0]],
        dtype=np.int16,
    )


def main() -> None:
    for name, array, kwargs in (
        ("v1-mixed-float32-k2", mixed_float32(), {"clusters": 2, "align": 4}),
        ("v1-int16-t8", small_int16(), {"word_bytes": 8, "align": 16}),
    ):
        np.save(HERE / f"{name}.npy", array)
        table = ibp_graph.compress(array, HERE / f"{name}.ibp", **kwargs)
        print(name, table)


if __name__ == "__main__":
    main()
