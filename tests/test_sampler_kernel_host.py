"""The sampler's CUDA draw (`cuda/sample_neighbors.cu`), run on the host (tests/simt).

The kernel source is built with g++ and the SIMT harness (the `lib` fixture of conftest) and
checked against a plain-Python transcription of its documented algorithm (SplitMix64 draws,
multiply-high reduction, Floyd's algorithm), and for the properties the sampler relies on:
offsets in range, distinct and ascending, every subset equally likely, output a function of
the key and the row only, no overflow for huge degrees. The `gpu` test checks that the real
launch gives the same bits as the host run.
"""

from __future__ import annotations

import ctypes
import itertools
from collections import Counter

import numpy as np
import pytest
import torch

from ibp_graph.kernels.sample_neighbors import MAX_K, capacity, entry_point, kernel_sample

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def reference_row(key: int, row: int, n: int, k: int) -> list[int]:
    """What the kernel writes for row ``row`` of population ``n`` under ``key``."""
    if n <= k:
        return [s if s < n else -1 for s in range(k)]
    state = _mix((key & M64) ^ _mix(row))
    picked: list[int] = []
    for s in range(k):
        j = n - k + s
        state = (state + GAMMA) & M64
        t = (_mix(state) * (j + 1)) >> 64
        picked.append(j if t in picked else t)
    return sorted(picked)


def sample_on_host(
    lib: ctypes.CDLL,
    deg: np.ndarray | list[int],
    k: int,
    key: int,
    *,
    cap: int | None = None,
    grid: int = 3,
    block: int = 64,
) -> np.ndarray:
    """Run the kernel (the entry point for ``k``, or the one of ``cap``): ``(rows, k)`` int64."""
    deg = np.ascontiguousarray(deg, dtype=np.int64)
    keys = np.array([key], dtype=np.int64)
    out = np.full((deg.size, k), -7, dtype=np.int64)
    lib.simt_sample_neighbors(
        ctypes.c_int(capacity(k) if cap is None else cap),
        ctypes.c_void_p(deg.ctypes.data),
        ctypes.c_void_p(keys.ctypes.data),
        ctypes.c_void_p(out.ctypes.data),
        ctypes.c_longlong(deg.size),
        ctypes.c_int(k),
        ctypes.c_uint(grid),
        ctypes.c_uint(block),
    )
    return out


def assert_valid(out: np.ndarray, deg: np.ndarray, k: int) -> None:
    """Every row: ``k`` distinct ascending offsets in ``[0, deg)`` (rows with ``deg > k``)."""
    deg = np.asarray(deg, dtype=np.int64)
    assert out.shape == (deg.size, k)
    assert (out >= 0).all()
    assert (out < deg[:, None]).all()
    assert (np.diff(out, axis=1) > 0).all()


def _scipy_stats():
    """``scipy.stats`` for the chi-square checks; the test skips where SciPy is missing."""
    return pytest.importorskip("scipy.stats", reason="the chi-square checks need SciPy")


HUGE = [2**32 + 1, 2**33 + 5, 2**40 + 3, 2**62, 3 * 2**61 + 17, 2**63 - 1]


@pytest.mark.parametrize("k", [1, 3, 32, 33, 256])
@pytest.mark.parametrize("key", [0, 12345, -(2**63), 2**62 - 1])
def test_kernel_matches_the_python_reference(lib, k: int, key: int) -> None:
    rng = np.random.default_rng(k)
    part = 5 if k > 32 else 30
    deg = np.concatenate(
        [
            rng.integers(-1, k + 1, part),  # all offsets, then -1
            np.full(part, k + 1),
            rng.integers(k + 1, 4 * k + 10, part),
            rng.integers(k + 1, 10**9, part),
            rng.choice(HUGE, part),
        ]
    )
    out = sample_on_host(lib, deg, k, key)
    want = [reference_row(key, i, int(n), k) for i, n in enumerate(deg)]
    assert out.tolist() == want


@pytest.mark.parametrize("k", [1, 2, 5, 31, 32, 33, 100])
def test_offsets_in_range_distinct_ascending(lib, k: int) -> None:
    rng = np.random.default_rng(100 + k)
    deg = np.concatenate([[k + 1, k + 2, 2 * k], rng.integers(k + 1, 50 * k, 300), HUGE])
    for key in (1, 2, 3):
        assert_valid(sample_on_host(lib, deg, k, key), deg, k)


def test_rows_up_to_k_take_all_offsets(lib) -> None:
    out = sample_on_host(lib, [0, 1, 4, 5, -3], 5, 9)
    assert out.tolist() == [
        [-1, -1, -1, -1, -1],
        [0, -1, -1, -1, -1],
        [0, 1, 2, 3, -1],
        [0, 1, 2, 3, 4],
        [-1, -1, -1, -1, -1],
    ]


@pytest.mark.parametrize("cap", [32, 256])
@pytest.mark.parametrize(("deg", "k"), [(6, 3), (5, 4), (7, 1), (9, 2)])
def test_every_subset_equally_likely(lib, cap: int, deg: int, k: int) -> None:
    stats = _scipy_stats()
    subsets = list(itertools.combinations(range(deg), k))
    per_key = 100 * len(subsets) // 4
    counts: Counter = Counter()
    for key in range(4):
        out = sample_on_host(lib, np.full(per_key, deg), k, 1000 * key + deg, cap=cap)
        counts.update(map(tuple, out.tolist()))
    assert set(counts) <= set(subsets)
    observed = [counts.get(s, 0) for s in subsets]
    assert sum(observed) == 4 * per_key
    assert stats.chisquare(observed).pvalue > 1e-4


@pytest.mark.parametrize("deg", [10**9 + 7, 3 * 2**61 + 17, 2**63 - 1])
def test_first_draw_uniform_for_large_degrees(lib, deg: int) -> None:
    """With ``k = 1`` the output is the first draw: 64 equal bins are equally full."""
    stats = _scipy_stats()
    rows = 6400
    out = sample_on_host(lib, np.full(rows, deg), 1, 77)[:, 0]
    assert (out >= 0).all() and (out < deg).all()
    bins = [(int(v) * 64) // deg for v in out]
    observed = np.bincount(bins, minlength=64)
    assert observed.size == 64
    assert stats.chisquare(observed).pvalue > 1e-4


def test_each_offset_equally_likely(lib) -> None:
    """Neighbor frequencies: deg 40, k 7, each offset picked with probability 7/40."""
    stats = _scipy_stats()
    rows = 8000
    out = sample_on_host(lib, np.full(rows, 40), 7, 5)
    observed = np.bincount(out.reshape(-1), minlength=40)
    assert stats.chisquare(observed).pvalue > 1e-4


def test_output_depends_on_key_and_row_only(lib) -> None:
    rng = np.random.default_rng(3)
    deg = rng.integers(6, 5000, 700)
    a = sample_on_host(lib, deg, 5, 42, grid=1, block=32)
    b = sample_on_host(lib, deg, 5, 42, grid=4, block=96)
    assert np.array_equal(a, b)
    c = sample_on_host(lib, deg, 5, 43)
    assert (a != c).any(axis=1).mean() > 0.95
    # Rows of equal degree are drawn independently of each other.
    same = sample_on_host(lib, np.full(500, 1000), 5, 42)
    assert len({tuple(r) for r in same.tolist()}) == 500


def test_k_at_the_cap(lib) -> None:
    assert capacity(1) == capacity(32) == 32 and capacity(33) == capacity(MAX_K) == MAX_K
    assert entry_point(MAX_K) == f"ibp_sample_neighbors_k{MAX_K}"
    for bad in (0, MAX_K + 1):
        with pytest.raises(ValueError, match=rf"k must be in \[1, {MAX_K}\], got {bad}"):
            capacity(bad)
    deg = np.array([MAX_K + 1, MAX_K + 2, 300, 512, 10**6, 2**40, 2**63 - 1])
    out = sample_on_host(lib, deg, MAX_K, 8)
    assert_valid(out, deg, MAX_K)
    # Beyond an entry point's array the launch writes nothing.
    untouched = sample_on_host(lib, [100, 100], 33, 8, cap=32)
    assert (untouched == -7).all()


def test_huge_degrees_do_not_overflow(lib) -> None:
    deg = np.array(HUGE * 50)
    for k in (1, 5, 40):
        out = sample_on_host(lib, deg, k, 2024)
        assert_valid(out, deg, k)
    # Offsets spread over the whole range, not only its low 32 or 63 bits.
    top = sample_on_host(lib, np.full(2000, 2**63 - 1), 1, 6)[:, 0]
    assert (top > 2**32).mean() > 0.99
    assert 0.45 < (top >= 2**62).mean() < 0.55


def test_launcher_checks_name_the_argument() -> None:
    with pytest.raises(ValueError, match="deg must be a CUDA tensor, got a tensor on cpu"):
        kernel_sample(torch.full((3,), 10), 2, torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="deg must be a CUDA tensor, got list"):
        kernel_sample([10, 10], 2, torch.zeros(1, dtype=torch.int64))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("k", [1, 5, 32, 100, MAX_K])
def test_gpu_kernel_matches_the_host_run(lib, k: int) -> None:
    rng = np.random.default_rng(k)
    deg = np.concatenate([rng.integers(k + 1, 30 * k + 40, 3000), HUGE, [k + 1] * 5])
    key = -(2**40) - k
    host = sample_on_host(lib, deg, k, key)
    dev_deg = torch.from_numpy(deg).cuda()
    dev_key = torch.tensor([key], dtype=torch.int64, device="cuda")
    assert np.array_equal(kernel_sample(dev_deg, k, dev_key).cpu().numpy(), host)
    # Any grid, any stream: the same bits.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        one_block = kernel_sample(dev_deg, k, dev_key, max_blocks=1)
    torch.cuda.current_stream().wait_stream(side)
    assert np.array_equal(one_block.cpu().numpy(), host)
    assert kernel_sample(dev_deg[:0], k, dev_key).shape == (0, k)
    with pytest.raises(ValueError, match="key must be a contiguous 1-D int64 tensor"):
        kernel_sample(dev_deg, k, dev_key.int())
    with pytest.raises(ValueError, match="key must be a CUDA tensor"):
        kernel_sample(dev_deg, k, dev_key.cpu())
    with pytest.raises(ValueError, match="k must be in"):
        kernel_sample(dev_deg, MAX_K + 1, dev_key)
