"""Tests of ibp_graph.bitops against plain Python bit loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ibp_graph.bitops import (
    bit_runs,
    exclusive_cumsum,
    low_mask,
    or_bits,
    pdep,
    pext,
    popcount,
    read_bits,
)

WIDTHS = {32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}

# --------------------------------------------------------------------------------------------
# Pure-Python references
# --------------------------------------------------------------------------------------------


def ref_pext(word: int, mask: int, nbits: int) -> int:
    out, k = 0, 0
    for i in range(nbits):
        if mask >> i & 1:
            out |= (word >> i & 1) << k
            k += 1
    return out


def ref_pdep(packed: int, mask: int, nbits: int) -> int:
    out, k = 0, 0
    for i in range(nbits):
        if mask >> i & 1:
            out |= (packed >> k & 1) << i
            k += 1
    return out


def ref_runs(mask: int, nbits: int) -> list[tuple[int, int]]:
    """(first bit, width) of each run of set bits, ascending."""
    runs, i = [], 0
    while i < nbits:
        if mask >> i & 1:
            j = i
            while j < nbits and mask >> j & 1:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------


@st.composite
def run_masks(draw: st.DrawFn, nbits: int) -> int:
    """A mask built from alternating gaps and runs, so it may have up to nbits / 2 runs."""
    mask, pos = 0, draw(st.integers(0, 3))
    while pos < nbits:
        width = draw(st.integers(1, 4))
        mask |= ((1 << width) - 1) << pos
        pos += width + draw(st.integers(1, 4))
    return mask & ((1 << nbits) - 1)


def masks(nbits: int) -> st.SearchStrategy[int]:
    full = (1 << nbits) - 1
    alternating = int("01" * (nbits // 2), 2)
    special = [0, full, alternating, full ^ alternating, 1, 1 << (nbits - 1), full >> 1]
    return st.one_of(st.sampled_from(special), st.integers(0, full), run_masks(nbits))


def words(nbits: int, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(WIDTHS[nbits], shape, elements=st.integers(0, (1 << nbits) - 1))


# --------------------------------------------------------------------------------------------
# popcount, low_mask, exclusive_cumsum
# --------------------------------------------------------------------------------------------


@settings(max_examples=40)
@given(nbits=st.sampled_from([32, 64]), data=st.data())
def test_popcount_matches_bin(nbits: int, data: st.DataObject) -> None:
    w = data.draw(words(nbits, (17,)))
    got = popcount(w)
    assert got.dtype == np.int64
    assert got.tolist() == [bin(int(x)).count("1") for x in w]


def test_low_mask_all_widths() -> None:
    widths = np.arange(65)
    got = low_mask(widths)
    assert got.dtype == np.uint64
    assert [int(x) for x in got] == [(1 << w) - 1 for w in range(65)]
    assert int(low_mask(np.int64(64))) == 2**64 - 1
    assert int(low_mask(0)) == 0
    grid = np.array([[0, 1], [63, 64]])
    assert low_mask(grid).shape == (2, 2)
    assert int(low_mask(grid)[1, 0]) == 2**63 - 1


@settings(max_examples=40)
@given(
    x=st.sampled_from([np.dtype(t) for t in ("u1", "i1", "<i4", "<i8", "?")]).flatmap(
        lambda dt: hnp.arrays(
            dt,
            hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=9),
            # int64 entries stay small enough that no prefix sum of 81 of them overflows
            elements=st.integers(-(2**50), 2**50) if dt == np.dtype("<i8") else None,
        )
    ),
    data=st.data(),
)
def test_exclusive_cumsum_matches_python(x: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    got = exclusive_cumsum(x, axis=axis)
    assert got.dtype == np.int64
    assert got.shape == x.shape
    want = np.zeros(x.shape, dtype=np.int64)
    for idx in np.ndindex(*x.shape):
        before = list(idx)
        acc = 0
        for j in range(idx[axis]):
            before[axis] = j
            acc += int(x[tuple(before)])
        want[idx] = acc
    np.testing.assert_array_equal(got, want)


def test_exclusive_cumsum_does_not_overflow_small_types() -> None:
    x = np.full(1000, 255, dtype=np.uint8)
    got = exclusive_cumsum(x)
    assert got[0] == 0 and got[-1] == 255 * 999


# --------------------------------------------------------------------------------------------
# bit_runs, pext, pdep
# --------------------------------------------------------------------------------------------


@settings(max_examples=60)
@given(nbits=st.sampled_from([32, 64]), data=st.data())
def test_bit_runs_describe_the_mask(nbits: int, data: st.DataObject) -> None:
    ms = data.draw(st.lists(masks(nbits), min_size=1, max_size=6))
    arr = np.array(ms, dtype=WIDTHS[nbits])
    runs = bit_runs(arr, nbits)
    expected = [ref_runs(m, nbits) for m in ms]
    assert runs.count == max(len(r) for r in expected)
    for arr_ in (runs.lo, runs.mask, runs.dst):
        assert arr_.dtype == arr.dtype
        assert arr_.shape == (runs.count, len(ms))
    for j, (m, want) in enumerate(zip(ms, expected, strict=True)):
        dst = 0
        for r in range(runs.count):
            lo, width_mask, d = (int(a[r, j]) for a in (runs.lo, runs.mask, runs.dst))
            if r < len(want):
                assert (lo, width_mask, d) == (want[r][0], (1 << want[r][1]) - 1, dst)
                dst += want[r][1]
            else:  # padding runs select nothing
                assert width_mask == 0
        rebuilt = 0
        for r in range(runs.count):
            rebuilt |= int(runs.mask[r, j]) << int(runs.lo[r, j])
        assert rebuilt == m


def test_bit_runs_of_zero_masks_and_shapes() -> None:
    zero = bit_runs(np.zeros((2, 3), dtype=np.uint32), 32)
    assert zero.count == 0
    assert zero.lo.shape == (0, 2, 3)
    w = np.arange(6, dtype=np.uint32).reshape(2, 3) * np.uint32(0x01010101)
    assert not pext(w, zero).any() and pext(w, zero).shape == (2, 3)
    assert not pdep(w, zero).any()
    full = bit_runs(np.full(4, 0xFFFFFFFFFFFFFFFF, dtype=np.uint64), 64)
    assert full.count == 1
    assert int(full.mask[0, 0]) == 2**64 - 1
    empty = bit_runs(np.zeros(0, dtype=np.uint64), 64)
    assert empty.count == 0


@settings(max_examples=80)
@given(nbits=st.sampled_from([32, 64]), data=st.data())
def test_pext_pdep_match_bit_loop(nbits: int, data: st.DataObject) -> None:
    ms = data.draw(st.lists(masks(nbits), min_size=1, max_size=6))
    rows = data.draw(st.integers(1, 4))
    w = data.draw(words(nbits, (rows, len(ms))))
    packed = data.draw(words(nbits, (rows, len(ms))))
    runs = bit_runs(np.array(ms, dtype=WIDTHS[nbits]), nbits)

    ext = pext(w, runs)
    dep = pdep(packed, runs)
    assert ext.dtype == dep.dtype == WIDTHS[nbits]
    assert ext.shape == dep.shape == (rows, len(ms))
    for i in range(rows):
        for j, m in enumerate(ms):
            assert int(ext[i, j]) == ref_pext(int(w[i, j]), m, nbits)
            assert int(dep[i, j]) == ref_pdep(int(packed[i, j]), m, nbits)
    # pdep inverts pext on the mask, pext inverts pdep on the low popcount bits.
    m_arr = np.array(ms, dtype=WIDTHS[nbits])
    np.testing.assert_array_equal(pdep(ext, runs), w & m_arr)
    low = low_mask(popcount(m_arr)).astype(WIDTHS[nbits])
    np.testing.assert_array_equal(pext(dep, runs), packed & low)


def test_pext_all_zero_and_all_one_masks() -> None:
    w = np.array([0, 1, 0xDEADBEEF, 0xFFFFFFFF], dtype=np.uint32)
    for m, want in ((0, np.zeros(4, dtype=np.uint32)), (0xFFFFFFFF, w)):
        runs = bit_runs(np.full(4, m, dtype=np.uint32), 32)
        np.testing.assert_array_equal(pext(w, runs), want)
        np.testing.assert_array_equal(pdep(w, runs), want)


def test_runs_take_selects_per_row_cluster_masks(rng: np.random.Generator) -> None:
    """``BitRuns.take`` with a per-row cluster index, as the codec uses it."""
    k, v, n = 3, 5, 11
    ms = rng.integers(0, 2**32, size=(k, v), dtype=np.uint64).astype(np.uint32)
    runs = bit_runs(ms, 32)
    cluster = rng.integers(0, k, size=n)
    w = rng.integers(0, 2**32, size=(n, v), dtype=np.uint64).astype(np.uint32)
    got = pext(w, runs.take((cluster,)))
    for i in range(n):
        for j in range(v):
            assert int(got[i, j]) == ref_pext(int(w[i, j]), int(ms[cluster[i], j]), 32)
    one = pext(w, runs.take((slice(0, 1),)))
    assert int(one[4, 2]) == ref_pext(int(w[4, 2]), int(ms[0, 2]), 32)


# --------------------------------------------------------------------------------------------
# or_bits / read_bits
# --------------------------------------------------------------------------------------------


@st.composite
def bit_fields(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Non-overlapping fields in ascending order: (values, widths, positions)."""
    n = draw(st.integers(1, 40))
    widths = draw(st.lists(st.integers(0, 64), min_size=n, max_size=n))
    gaps = draw(
        st.lists(st.sampled_from([0, 0, 0, 1, 3, 7, 31, 63, 64, 65, 130]), min_size=n, max_size=n)
    )
    values = [draw(st.integers(0, (1 << w) - 1)) for w in widths]
    pos = draw(st.integers(0, 200))
    positions = []
    for w, g in zip(widths, gaps, strict=True):
        pos += g
        positions.append(pos)
        pos += w
    return (
        np.array(values, dtype=np.uint64),
        np.array(widths, dtype=np.int64),
        np.array(positions, dtype=np.int64),
    )


def stream_as_int(stream: np.ndarray) -> int:
    return sum(int(x) << (64 * i) for i, x in enumerate(stream))


@settings(max_examples=150)
@given(fields=bit_fields(), rows=st.sampled_from([1, 2, 4]))
def test_or_bits_read_bits_round_trip(
    fields: tuple[np.ndarray, np.ndarray, np.ndarray], rows: int
) -> None:
    values, widths, positions = fields
    end = int(positions[-1] + widths[-1])
    out = np.zeros(end // 64 + 2, dtype=np.uint64)
    # A leading 2-D block (C order keeps it ascending), as the codec passes fields, then the
    # rest as a 1-D call: fields of separate calls may share a word.
    n = values.size // rows * rows
    shape = (rows, n // rows)
    or_bits(out, values[:n].reshape(shape), widths[:n].reshape(shape), positions[:n].reshape(shape))
    or_bits(out, values[n:], widths[n:], positions[n:])

    want = 0
    for v, p in zip(values.tolist(), positions.tolist(), strict=True):
        want |= v << p
    assert stream_as_int(out) == want
    got = read_bits(out, positions, widths)
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, values)
    got2 = read_bits(out, positions.reshape(1, -1), widths.reshape(1, -1))
    assert got2.shape == (1, values.size)


@pytest.mark.parametrize(
    "position,width",
    [(0, 64), (1, 64), (63, 1), (63, 2), (60, 8), (64, 64), (127, 64), (70, 0), (120, 33)],
)
def test_fields_straddling_words(position: int, width: int) -> None:
    value = (0xA5A5A5A5_5A5A5A5A if width else 0) & ((1 << width) - 1)
    out = np.full(4, 0, dtype=np.uint64)
    or_bits(out, np.array([value], dtype=np.uint64), np.array([width]), np.array([position]))
    assert stream_as_int(out) == value << position
    got = read_bits(out, np.array([position]), np.array([width]))
    assert int(got[0]) == value


def test_or_bits_ors_into_existing_bits() -> None:
    out = np.array([0xF0, 0], dtype=np.uint64)
    or_bits(out, np.array([0x0F], dtype=np.uint64), np.array([4]), np.array([0]))
    assert int(out[0]) == 0xFF
    or_bits(out, np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64), np.zeros(0))
    assert int(out[0]) == 0xFF


@settings(max_examples=60)
@given(
    stream=words(64, (3,)),
    position=st.integers(0, 64 * 3 + 500),
    width=st.integers(0, 64),
)
def test_read_bits_clamps_at_the_end_of_the_stream(
    stream: np.ndarray, position: int, width: int
) -> None:
    total = 64 * stream.size
    big = stream_as_int(stream)
    got = int(read_bits(stream, np.array([position]), np.array([width]))[0])
    assert got < (1 << width)
    if width == 0:
        assert got == 0
    elif position + width <= total:  # inside the stream: exact
        assert got == (big >> position) & ((1 << width) - 1)
    elif position < total:  # runs past the end: the bits inside are still right
        inside = total - position
        assert got & ((1 << inside) - 1) == big >> position
    # Past the end entirely: no fault, and the value is whatever the last word holds.


def test_read_bits_of_a_one_word_stream() -> None:
    stream = np.array([0x8000_0000_0000_0001], dtype=np.uint64)
    got = read_bits(stream, np.array([0, 63, 0, 1000]), np.array([1, 1, 64, 0]))
    assert [int(x) for x in got] == [1, 1, 0x8000_0000_0000_0001, 0]


def test_add_bits_equals_or_bits() -> None:
    """The GPU encoder's packing (scatter-add) gives the CPU encoder's bitstream."""
    from ibp_graph.bitops import add_bits

    rng = np.random.default_rng(9)
    widths = rng.integers(0, 65, (40, 25))
    widths[:, ::7] = 0
    values = rng.integers(0, 2**63, widths.shape, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    values = values & low_mask(widths)
    positions = (np.cumsum(widths.reshape(-1)) - widths.reshape(-1) + 5).reshape(widths.shape)
    size = int(positions.max() + 64) // 64 + 2
    a = np.zeros(size, dtype=np.uint64)
    b = np.zeros(size, dtype=np.uint64)
    or_bits(a, values, widths, positions)
    add_bits(b, values, widths, positions, np.add.at, np)
    assert np.array_equal(a, b)
