"""Tests of the reference one-mask IBP size model and of the real-table loaders."""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import real_tables  # noqa: E402
from benchmarks.reference_ibp import (  # noqa: E402
    THRESHOLDS,
    as_words,
    bit_census,
    reference_ratio,
)

# --------------------------------------------------------------------------------------------
# A deliberately naive model (Python loops over rows and words) to check the vectorised one.
# --------------------------------------------------------------------------------------------


def naive_per_threshold(array: np.ndarray, t: int) -> dict[float, int]:
    a = np.ascontiguousarray(array)
    n = a.shape[0]
    raw = a.view(np.uint8).reshape(n, -1)
    v = -(-raw.shape[1] // t)
    words = [
        [
            int.from_bytes(bytes(raw[i, j * t : (j + 1) * t]).ljust(t, b"\0"), "little")
            for j in range(v)
        ]
        for i in range(n)
    ]
    out = {}
    for th in THRESHOLDS:
        masks, vals = [], []
        for j in range(v):
            mask = val = 0
            for b in range(8 * t):
                ones = sum((words[i][j] >> b) & 1 for i in range(n))
                majority = 1 if 2 * ones > n else 0
                agree = ones if majority else n - ones
                if 100 * agree >= round(th * 100) * n:
                    mask |= 1 << b
                    val |= majority << b
            masks.append(mask)
            vals.append(val)
        total = 0
        for i in range(n):
            bits = v
            for j in range(v):
                if words[i][j] & masks[j] == vals[j]:
                    bits += 8 * t - bin(masks[j]).count("1")
                else:
                    bits += 8 * t
            total += min(math.ceil(bits / 8), v * t)
        out[th] = total
    return out


# --------------------------------------------------------------------------------------------
# Hand-computed cases
# --------------------------------------------------------------------------------------------


def test_all_zero_table():
    x = np.zeros((10, 16), dtype=np.float32)
    r = reference_ratio(x, 4)
    # every bit invariant (majority 0): each row = 16 flag bits = 2 bytes
    assert r["raw_bytes"] == 640
    assert r["stored_bytes"] == 20
    assert r["ratio"] == 32.0
    assert r["threshold"] == 0.70  # all thresholds tie: the lowest wins
    assert set(r["per_threshold"].values()) == {20}
    r8 = reference_ratio(x, 8)
    # 8 flag bits = 1 byte per row
    assert r8["stored_bytes"] == 10
    assert r8["ratio"] == 64.0


def test_one_deviating_word():
    x = np.zeros((10, 8), dtype=np.int32)
    x[0, 3] = 1  # bit 0 of word column 3 agrees in 9 of 10 rows (90%)
    before = x.copy()
    r = reference_ratio(x, 4)
    # th <= 0.90: the bit is invariant; row 0's word 3 is unmatched:
    #   row 0 = 8 flags + 32 raw bits = 5 bytes, the 9 others = 8 flags = 1 byte -> 14.
    # th = 0.95: column 3 keeps 1 free bit; every word matches: 8 + 1 = 9 bits = 2 bytes
    #   per row -> 20.
    assert r["per_threshold"] == {0.7: 14, 0.75: 14, 0.8: 14, 0.85: 14, 0.9: 14, 0.95: 20}
    assert r["stored_bytes"] == 14
    assert r["threshold"] == 0.70
    assert r["raw_bytes"] == 320
    assert r["ratio"] == pytest.approx(320 / 14)
    np.testing.assert_array_equal(x, before)  # input untouched


def test_random_int32_is_incompressible():
    rng = np.random.default_rng(0)
    x = rng.integers(-(2**31), 2**31, size=(1000, 16), dtype=np.int64).astype(np.int32)
    for t in (4, 8):
        r = reference_ratio(x, t)
        # no bit reaches 70% agreement; 16*33 bits > 64 bytes -> raw fallback
        assert r["stored_bytes"] == r["raw_bytes"] == 64_000
        assert r["ratio"] == 1.0


def test_padding_three_float16():
    z = np.zeros((5, 3), dtype=np.float16)  # 6 bytes per row
    for t in (4, 8):
        r = reference_ratio(z, t)
        assert r["words_per_row"] == (2 if t == 4 else 1)
        assert r["stored_bytes"] == 5  # <= 2 flag bits -> 1 byte per row
        assert r["raw_bytes"] == 30
        assert r["ratio"] == 6.0

    # rows 0xFFFF*3 and 0x0000*3: the 48 data bits are 50/50 (never invariant), the 16
    # padding bits are invariant zeros and free.
    x = np.array([[0xFFFF] * 3, [0] * 3], dtype=np.uint16).view(np.float16)
    r4 = reference_ratio(x, 4)
    assert r4["words_per_row"] == 2
    # 2 flags + 32 (word 0) + 16 (word 1 free bits) = 50 bits -> 7 bytes < 8 = V*T
    assert r4["stored_bytes"] == 14
    assert r4["raw_bytes"] == 12
    assert r4["ratio"] == pytest.approx(6 / 7)
    r8 = reference_ratio(x, 8)
    # 1 flag + 48 free bits = 49 bits -> 7 bytes
    assert r8["stored_bytes"] == 14

    rng = np.random.default_rng(1)
    y = rng.integers(0, 2**16, size=(500, 3), dtype=np.uint16).view(np.float16)
    assert reference_ratio(y, 4)["ratio"] == pytest.approx(6 / 7)


def test_words_are_little_endian_and_padded():
    x = np.array([[1, 2, 3, 4, 5]], dtype=np.uint8)
    w4 = as_words(x, 4)
    assert w4.dtype == np.dtype("<u4")
    assert w4.tolist() == [[0x04030201, 0x00000005]]
    w8 = as_words(x, 8)
    assert w8.tolist() == [[0x0000000504030201]]
    f = np.ones((2, 4), dtype=np.float32)
    w = as_words(f, 4)
    assert not w.flags.writeable  # a view of the caller's data must not be writable
    assert w.tolist() == [[0x3F800000] * 4] * 2


@pytest.mark.parametrize("n", [1, 7, 254, 255, 256, 600])
@pytest.mark.parametrize("t", [4, 8])
def test_bit_census_matches_naive(n, t):
    rng = np.random.default_rng(n * 10 + t)
    x = rng.integers(0, 2**32, size=(n, 5), dtype=np.uint64).astype(np.uint32)
    x[rng.random(x.shape) < 0.5] = 0
    words = as_words(x, t)
    bits = 8 * t
    naive = np.stack(
        [((words >> words.dtype.type(b)) & words.dtype.type(1)).sum(0) for b in range(bits)]
    )
    got = bit_census(words)
    assert got.dtype == np.int64
    assert got.shape == (bits, words.shape[1])
    np.testing.assert_array_equal(got, naive)


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int64, np.bool_]
)
@pytest.mark.parametrize("t", [4, 8])
def test_matches_naive_model(dtype, t):
    rng = np.random.default_rng(zlib.crc32(f"{np.dtype(dtype).str}-{t}".encode()))
    n, d = 40, 7
    x = np.zeros((n, d), dtype=dtype)
    if np.dtype(dtype) == np.bool_:
        x[:] = rng.random((n, d)) < 0.1
    else:
        vals = rng.integers(1, 100, size=(n, d)).astype(dtype)
        keep = rng.random((n, d)) < rng.uniform(0.05, 0.4)
        x[keep] = vals[keep]
    r = reference_ratio(x, t)
    expected = naive_per_threshold(x, t)
    assert r["per_threshold"] == expected
    assert r["stored_bytes"] == min(expected.values())
    assert r["raw_bytes"] == n * d * np.dtype(dtype).itemsize
    assert r["ratio"] == r["raw_bytes"] / r["stored_bytes"]


def test_non_contiguous_input_and_errors():
    rng = np.random.default_rng(3)
    base = (rng.random((50, 20)) < 0.1).astype(np.float32)
    view = base[:, ::2]
    assert reference_ratio(view) == reference_ratio(np.ascontiguousarray(view))
    with pytest.raises(ValueError, match="2-D"):
        reference_ratio(np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="word_bytes"):
        reference_ratio(np.zeros((2, 2), dtype=np.float32), word_bytes=2)
    with pytest.raises(ValueError, match="empty"):
        reference_ratio(np.zeros((0, 3), dtype=np.float32))


# --------------------------------------------------------------------------------------------
# Loader safety (no datasets needed)
# --------------------------------------------------------------------------------------------


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_planetoid_unpickler_refuses_foreign_globals(tmp_path):
    path = tmp_path / "ind.evil.x"
    path.write_bytes(pickle.dumps(_Evil(), protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="refusing to load global"):
        real_tables._load_planetoid_matrix(path)


def test_datasets_folder_override(tmp_path):
    assert not real_tables.available(tmp_path)
    code = "from benchmarks import real_tables as r; print(r.SHARED_DATASETS)"
    env = {**os.environ, "IBP_GRAPH_DATASETS": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path)


# --------------------------------------------------------------------------------------------
# Real tables (skipped without ../shared/datasets)
# --------------------------------------------------------------------------------------------

EXPECTED = {
    "cora-bow": ((2708, 1433), np.float32),
    "citeseer-bow": ((3327, 3703), np.float32),
    "pubmed-tfidf-1060rows": ((1060, 500), np.float32),
    "tolokers": ((11758, 10), np.float32),
    "minesweeper": ((10000, 7), np.float32),
    "actor": ((7600, 932), np.float32),
    "cornell": ((183, 1703), np.float32),
    "texas": ((183, 1703), np.float32),
    "wisconsin": ((251, 1703), np.float32),
    "facebook-bow": ((22470, 4714), np.float32),
    "twitch-de-bow": ((9498, 3170), np.float32),
    "facebook-svd100-float32": ((22470, 100), np.float32),
    "facebook-svd100-float16": ((22470, 100), np.float16),
}

needs_datasets = pytest.mark.skipif(
    not real_tables.available(),
    reason=f"real datasets not found under {real_tables.SHARED_DATASETS} "
    "(set IBP_GRAPH_DATASETS to the shared/datasets folder)",
)


@pytest.fixture(scope="module")
def tables():
    return real_tables.load_all()


@needs_datasets
def test_real_tables_shapes_dtypes_values(tables):
    assert [name for name, _, _ in tables] == list(EXPECTED)
    for name, x, note in tables:
        shape, dtype = EXPECTED[name]
        assert isinstance(x, np.ndarray), name
        assert x.shape == shape, name
        assert x.dtype == dtype, name
        assert x.flags.c_contiguous, name
        assert np.isfinite(x).all(), name
        assert isinstance(note, str) and note, name
        if name.endswith("-bow") or name in ("minesweeper", "actor", "cornell", "texas"):
            assert np.isin(x, (0.0, 1.0)).all(), name
        if name.startswith("facebook-svd"):
            assert note.startswith("DERIVED"), name
        else:
            assert "not derived" in note, name


@needs_datasets
def test_real_tables_content(tables):
    by_name = {name: x for name, x, _ in tables}
    # CiteSeer: PyG inserts 15 all-zero rows for the isolated test ids
    assert int((~by_name["citeseer-bow"].any(axis=1)).sum()) == 15
    assert not (~by_name["cora-bow"].any(axis=1)).any()
    assert int(by_name["cora-bow"].sum()) == 49216  # ones in Cora's BoW
    assert int(by_name["facebook-bow"].sum()) == 314583
    pub = by_name["pubmed-tfidf-1060rows"]
    assert pub.min() >= 0 and pub.max() > 0 and not np.isin(pub, (0.0, 1.0)).all()
    assert len(np.unique(by_name["tolokers"])) == 7053
    svd32 = by_name["facebook-svd100-float32"]
    np.testing.assert_array_equal(by_name["facebook-svd100-float16"], svd32.astype(np.float16))
    norms = np.linalg.norm(svd32.astype(np.float64), axis=0)  # = singular values
    assert (np.diff(norms) <= 1e-3 * norms[0]).all()


@needs_datasets
def test_facebook_svd_is_deterministic(tables):
    before = dict((n, x) for n, x, _ in tables)["facebook-svd100-float32"]
    real_tables._facebook_svd.cache_clear()
    _, again, _ = real_tables.load_facebook_svd(np.float32)
    np.testing.assert_array_equal(again, before)
