"""Codec-level tests: fit, encode and decode rows of every dtype, bit for bit."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import (
    BITS_DTYPES,
    DTYPE_NAMES,
    SPECIAL_BITS,
    TABLE_KINDS,
    Encoded,
    encode_table,
    encode_words,
    from_bits,
    make_table,
    rows_stream,
    same_bits,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ibp_graph.codec import (
    ALIGNMENTS,
    CodecError,
    CodecParams,
    align_up,
    decode,
    encode,
    encoded_bits,
)
from ibp_graph.dtypes import rows_to_words, words_to_rows
from ibp_graph.preprocess import fit

# --------------------------------------------------------------------------------------------
# Strategy: a table and the codec options to encode it with
# --------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    x: np.ndarray
    word_bytes: int
    align: int
    clusters: int
    fit_rows: np.ndarray | None
    source: str

    def encode(self) -> Encoded:
        return encode_table(
            self.x,
            self.name,
            self.word_bytes,
            align=self.align,
            clusters=self.clusters,
            fit_rows=self.fit_rows,
        )


@st.composite
def cases(draw: st.DrawFn, max_n: int = 60, max_d: int = 40) -> Case:
    """Any dtype, T, alignment and k; values from raw bits or structured distributions.

    Parameters are fitted on all rows, or on every third row only, so that rows the fit never
    saw (escaped words, raw rows) occur as well.
    """
    name = draw(st.sampled_from(DTYPE_NAMES))
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    source = draw(st.sampled_from((*TABLE_KINDS, "hypothesis")))
    if source == "hypothesis":  # hypothesis' own bit patterns: extremes, repeats, shrinking
        x = from_bits(draw(hnp.arrays(BITS_DTYPES[name], (n, d))), name)
    else:
        seed = draw(st.integers(0, 2**32 - 1))
        x = make_table(np.random.default_rng(seed), name, n, d, source)
    part = draw(st.booleans()) and n > 3
    return Case(
        name=name,
        x=x,
        word_bytes=draw(st.sampled_from([4, 8])),
        align=draw(st.sampled_from(ALIGNMENTS)),
        clusters=draw(st.sampled_from([1, 3])),
        fit_rows=np.arange(0, n, 3) if part else None,
        source=source,
    )


def check_layout(enc: Encoded) -> None:
    """Size, alignment and raw-row properties of an encoded chunk."""
    sizes, raw, data = enc.chunk.sizes, enc.chunk.raw, enc.chunk.data
    n = enc.words.shape[0]
    align = enc.align
    assert sizes.shape == raw.shape == (n,)
    assert data.dtype == np.uint8 and data.size == int(sizes.sum())
    # No stored row is larger than the aligned raw row; encoded ones are strictly smaller.
    assert np.all(sizes <= enc.aligned_raw)
    assert np.all(sizes[~raw] < enc.aligned_raw)
    assert np.all(sizes[raw] == enc.aligned_raw)
    assert np.all(sizes % align == 0) and np.all(sizes >= align)
    # The stored length alone tells raw rows apart.
    np.testing.assert_array_equal(raw, sizes >= enc.raw_row_bytes)
    assert np.all(enc.starts % align == 0)
    # Encoded sizes are exactly the aligned encoded bits; raw rows are those not smaller.
    bits = encoded_bits(enc.words, enc.params, enc.cluster)
    enc_sizes = align_up(-(-bits // 8), align)
    np.testing.assert_array_equal(sizes[~raw], enc_sizes[~raw])
    assert np.all(enc_sizes[raw] >= enc.aligned_raw)
    # Raw rows are the padded words as they are, then zeros up to the alignment.
    vt = enc.raw_row_bytes
    for i in np.flatnonzero(raw):
        s = int(enc.starts[i])
        assert data[s : s + vt].tobytes() == enc.words[i].tobytes()
        assert not data[s + vt : s + int(sizes[i])].any()
    if enc.cluster is not None:
        assert enc.cluster.shape == (n,) and int(enc.cluster.max()) < enc.params.num_clusters


def record_forms(enc: Encoded) -> None:
    raw = enc.chunk.raw
    grouped = enc.grouped()
    event(f"raw rows: {'yes' if raw.any() else 'no'}")
    event(f"grouped rows: {'yes' if grouped.any() else 'no'}")
    event(f"flat rows: {'yes' if (~raw & ~grouped).any() else 'no'}")


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(case=cases())
def test_round_trip_is_bit_exact(case: Case) -> None:
    enc = case.encode()
    record_forms(enc)
    decoded = enc.decode()
    assert decoded.dtype == enc.words.dtype
    assert same_bits(decoded, enc.words)
    back = words_to_rows(decoded, case.x.shape[1], case.name)
    assert back.dtype == case.x.dtype
    assert same_bits(back, case.x)
    check_layout(enc)


@settings(max_examples=60)
@given(case=cases(), data=st.data())
def test_decode_any_index_order_with_repeats(case: Case, data: st.DataObject) -> None:
    enc = case.encode()
    n = case.x.shape[0]
    ids = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=3 * n)), dtype=np.int64)
    got = enc.decode(ids)
    assert got.shape == (ids.size, enc.params.num_words)
    assert same_bits(got, enc.words[ids])


@settings(max_examples=40)
@given(case=cases())
def test_fit_and_encode_are_deterministic(case: Case) -> None:
    a, b = case.encode(), case.encode()
    for f in ("masks", "code_bits", "bitvals"):
        assert same_bits(getattr(a.params, f), getattr(b.params, f))
    assert a.chunk.data.tobytes() == b.chunk.data.tobytes()
    np.testing.assert_array_equal(a.chunk.sizes, b.chunk.sizes)
    # Encoding in two halves gives the same rows as encoding all at once.
    n = case.x.shape[0]
    h = n // 2
    cl = a.cluster
    first = encode(a.words[:h], a.params, case.align, None if cl is None else cl[:h])
    second = encode(a.words[h:], a.params, case.align, None if cl is None else cl[h:])
    assert first.data.tobytes() + second.data.tobytes() == a.chunk.data.tobytes()


@settings(max_examples=60)
@given(case=cases(max_n=30, max_d=30), data=st.data())
def test_short_stored_length_raises_never_wrong_rows(case: Case, data: st.DataObject) -> None:
    """An encoded row given fewer bytes than its fields need is refused; otherwise exact."""
    enc = case.encode()
    cut = shortened(enc, data)
    if cut is None:
        return
    lengths, need = cut
    if need is not None:
        with pytest.raises(CodecError, match=f"needs {need} bits"):
            enc.decode(lengths=lengths)
    else:  # only alignment padding was cut: the row still decodes exactly
        assert same_bits(enc.decode(lengths=lengths), enc.words)


def shortened(enc: Encoded, data: st.DataObject) -> tuple[np.ndarray, int | None] | None:
    """The stored lengths with one encoded row's cut by 1 byte or more, and the bits that row
    needs where it no longer stores them (None where only alignment padding was cut); None
    without an encoded row."""
    encoded_rows = np.flatnonzero(~enc.chunk.raw)
    if encoded_rows.size == 0:
        event("no encoded row")
        return None
    i = int(data.draw(st.sampled_from(encoded_rows.tolist())))
    lengths = enc.lengths.copy()
    lengths[i] -= data.draw(st.integers(1, int(lengths[i])))
    need = int(encoded_bits(enc.words[i : i + 1], enc.params, _cl(enc, i))[0])
    return lengths, (need if lengths[i] * 8 < need else None)


def _cl(enc: Encoded, i: int) -> np.ndarray | None:
    return None if enc.cluster is None else enc.cluster[i : i + 1]


# --------------------------------------------------------------------------------------------
# Explicit cases
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("clusters", [1, 3])
@pytest.mark.parametrize("align", [1, 16])
def test_all_row_forms_occur(rng: np.random.Generator, align: int, clusters: int) -> None:
    """Few-valued rows are flat, sparse rows grouped, random rows (unseen by the fit) raw."""
    x = np.concatenate(
        [
            make_table(rng, "float32", n, 100, k)
            for n, k in ((100, "few"), (100, "sparse"), (50, "bits"))
        ]
    )
    enc = encode_table(x, "float32", align=align, clusters=clusters, fit_rows=np.arange(200))
    raw, grouped = enc.chunk.raw, enc.grouped()
    flat = ~raw & ~grouped
    assert flat[:100].all() and grouped[100:200].all() and raw[200:].all()
    assert same_bits(enc.decode(), enc.words)
    check_layout(enc)


@pytest.mark.parametrize("word_bytes", [4, 8])
@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_one_row_one_column(name: str, word_bytes: int) -> None:
    for bits in [*SPECIAL_BITS[name], 0]:
        x = from_bits(np.array([[bits]], dtype=BITS_DTYPES[name]), name)
        for align in (1, 32):
            enc = encode_table(x, name, word_bytes, align=align)
            assert enc.words.shape == (1, -(-BITS_DTYPES[name].itemsize // word_bytes))
            assert same_bits(words_to_rows(enc.decode(), 1, name), x)
            check_layout(enc)


@pytest.mark.parametrize("align", [1, 16])
@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_all_zero_table(name: str, align: int) -> None:
    x = make_table(np.random.default_rng(0), name, 50, 33, "zeros")
    enc = encode_table(x, name, align=align)
    assert not enc.chunk.raw.any()
    assert enc.grouped().all()  # G bit + one chunk bit per 32 words: the smallest form
    v = enc.params.num_words
    bits = 1 + 1 + -(-v // 32)
    np.testing.assert_array_equal(enc.chunk.sizes, align_up(-(-bits // 8), align))
    assert not enc.decode().any()


@pytest.mark.parametrize("align", [1, 4, 16])
@pytest.mark.parametrize("word_bytes", [4, 8])
def test_odd_width_rows_are_padded_in_the_word_domain(word_bytes: int, align: int) -> None:
    x = make_table(np.random.default_rng(3), "float16", 40, 3, "specials")
    words = rows_to_words(x, "float16", word_bytes)
    assert words.shape == (40, -(-6 // word_bytes))
    padding = words.view(np.uint8).reshape(40, -1)[:, 6:]
    assert padding.size and not padding.any()
    enc = encode_words(words, "float16", align=align)
    decoded = enc.decode()
    assert same_bits(decoded, words)
    assert not decoded.view(np.uint8).reshape(40, -1)[:, 6:].any()
    back = words_to_rows(decoded, 3, "float16")
    assert back.shape == (40, 3) and same_bits(back, x)


def test_incompressible_table_is_stored_raw(rng: np.random.Generator) -> None:
    # Enough rows that no 255-entry dictionary can memorise a column.
    x = rng.integers(-(2**31), 2**31, size=(2000, 16), dtype=np.int64).astype(np.int32)
    enc = encode_table(x, "int32", align=16)
    assert enc.chunk.raw.all()
    assert x.nbytes / enc.chunk.sizes.sum() == pytest.approx(1.0)
    assert same_bits(words_to_rows(enc.decode(), 16, "int32"), x)
    check_layout(enc)


@pytest.mark.parametrize("align", [1, 16])
def test_sparse_bag_of_words_compresses_with_grouped_rows(
    sparse_table: np.ndarray, align: int
) -> None:
    enc = encode_table(sparse_table, "float32", align=align)
    ratio = sparse_table.nbytes / enc.chunk.sizes.sum()
    assert ratio > 30
    assert not enc.chunk.raw.any()
    assert enc.grouped().mean() > 0.9
    assert same_bits(words_to_rows(enc.decode(), 1433, "float32"), sparse_table)


SPECIALS_AMONG_ZEROS = {
    # name: (NaN with payload, -0.0, smallest subnormal)
    "float32": (0x7FC12345, 0x80000000, 0x00000001),
    "float16": (0x7E55, 0x8000, 0x0001),
    "bfloat16": (0x7FC5, 0x8000, 0x0001),
    "float64": (0x7FF8_0000_1234_5678, 0x8000_0000_0000_0000, 0x1),
}


@pytest.mark.parametrize("align", [1, 16])
@pytest.mark.parametrize("word_bytes", [4, 8])
@pytest.mark.parametrize("name", list(SPECIALS_AMONG_ZEROS))
def test_nan_payload_negative_zero_subnormal_among_zeros(
    name: str, word_bytes: int, align: int
) -> None:
    nan, neg_zero, tiny = SPECIALS_AMONG_ZEROS[name]
    bits = np.zeros((20, 12), dtype=BITS_DTYPES[name])
    bits[3, 5], bits[7, 0], bits[19, 11] = nan, neg_zero, tiny
    x = from_bits(bits, name)
    enc = encode_table(x, name, word_bytes, align=align)
    back = words_to_rows(enc.decode(), 12, name)
    assert same_bits(back, x)
    got = back.view(BITS_DTYPES[name])
    assert (int(got[3, 5]), int(got[7, 0]), int(got[19, 11])) == (nan, neg_zero, tiny)
    if name == "float32":
        assert np.isnan(back[3, 5]) and np.signbit(back[7, 0]) and back[7, 0] == 0
        assert back[19, 11] == np.float32(1.4e-45)


def test_four_clusters(rng: np.random.Generator) -> None:
    pops = [make_table(rng, "float32", 500, 50, k) for k in ("sparse", "few", "normal", "zeros")]
    pops[2] = pops[2] * np.float32(1e20)
    x = np.concatenate(pops)[rng.permutation(2000)]
    enc = encode_table(x, "float32", align=4, clusters=4)
    assert enc.params.num_clusters == 4
    assert same_bits(words_to_rows(enc.decode(), 50, "float32"), x)
    check_layout(enc)


# --------------------------------------------------------------------------------------------
# Hand-made parameters: the codec alone, whatever the fit would choose
# --------------------------------------------------------------------------------------------


@st.composite
def arbitrary_params(draw: st.DrawFn, max_n: int = 40, max_v: int = 70) -> Encoded:
    """Random masks, code widths 1..8, dictionaries drawn from the words, random clusters.

    Code widths above 4 give dictionaries of more than 15 entries (the sorted-search match
    for 4-byte words); duplicate entries and all-zero or all-one masks occur.
    """
    word_bytes = draw(st.sampled_from([4, 8]))
    k = draw(st.integers(1, 4))
    v = draw(st.integers(1, max_v))
    n = draw(st.integers(1, max_n))
    align = draw(st.sampled_from(ALIGNMENTS))
    max_b = draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    wd = np.dtype(f"<u{word_bytes}")
    top = int(np.iinfo(wd).max)
    # Words: each column draws from a small pool of values, with some uniform noise.
    pool = rng.integers(0, top, size=(6, v), dtype=wd, endpoint=True)
    words = pool[rng.integers(0, 6, size=(n, v)), np.arange(v)]
    noise = rng.random((n, v)) < draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    words[noise] = rng.integers(0, top, size=int(noise.sum()), dtype=wd, endpoint=True)
    mask_kind = draw(st.sampled_from(["random", "top", "zero", "full", "mixed"]))
    choices = {
        "random": rng.integers(0, top, size=(k, v), dtype=wd, endpoint=True),
        "top": np.full((k, v), top ^ (top >> 12), dtype=wd),
        "zero": np.zeros((k, v), dtype=wd),
        "full": np.full((k, v), top, dtype=wd),
    }
    if mask_kind == "mixed":
        stack = np.stack(list(choices.values()))
        masks = stack[rng.integers(0, 4, size=(k, v)), np.arange(k)[:, None], np.arange(v)]
    else:
        masks = choices[mask_kind]
    code_bits = rng.integers(1, max_b, size=(k, v), endpoint=True).astype(np.uint8)
    code_bits.flat[0] = max_b
    e = (1 << max_b) - 1
    src = words[rng.integers(0, n, size=(k, v, e)), np.arange(v)[None, :, None]]
    bitvals = src & masks[:, :, None]
    bitvals[np.arange(e) >= ((1 << code_bits.astype(np.int64)) - 1)[:, :, None]] = 0
    params = CodecParams(word_bytes=word_bytes, masks=masks, code_bits=code_bits, bitvals=bitvals)
    cluster = rng.integers(0, k, size=n).astype(np.uint8) if k > 1 else None
    chunk = encode(words, params, align, cluster)
    return Encoded(words, params, cluster, chunk, align)


@settings(max_examples=200)
@given(enc=arbitrary_params(), data=st.data())
def test_round_trip_with_arbitrary_params(enc: Encoded, data: st.DataObject) -> None:
    record_forms(enc)
    event(f"dictionary entries > 15: {enc.params.max_entries > 15}")
    assert same_bits(enc.decode(), enc.words)
    check_layout(enc)
    n = enc.words.shape[0]
    ids = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=2 * n)), dtype=np.int64)
    assert same_bits(enc.decode(ids), enc.words[ids])


def test_decode_of_no_rows() -> None:
    x = np.ones((4, 3), dtype=np.float32)
    enc = encode_table(x, "float32")
    empty = np.zeros(0, dtype=np.int64)
    out = decode(enc.stream, empty, empty, enc.params)
    assert out.shape == (0, enc.params.num_words)


def test_stream_helper_pads_to_whole_words() -> None:
    s = rows_stream(np.arange(9, dtype=np.uint8))
    assert s.dtype == np.uint64 and s.size == 2
    assert rows_stream(np.zeros(0, dtype=np.uint8)).size == 1


# --------------------------------------------------------------------------------------------
# Truncated rows, explicitly
# --------------------------------------------------------------------------------------------


def test_truncated_encoded_row_raises(rng: np.random.Generator) -> None:
    x = make_table(rng, "float32", 30, 20, "mixed")
    enc = encode_table(x, "float32", align=1, fit_rows=np.arange(0, 30, 3))
    encoded_rows = np.flatnonzero(~enc.chunk.raw)
    assert encoded_rows.size > 5
    for i in encoded_rows:
        lengths = enc.lengths.copy()
        lengths[i] -= min(3, int(lengths[i]))
        with pytest.raises(CodecError, match="bits but stores"):
            enc.decode(lengths=lengths)
        with pytest.raises(CodecError):
            enc.decode(np.array([i]), lengths=lengths)


# --------------------------------------------------------------------------------------------
# Parameter validation
# --------------------------------------------------------------------------------------------


def valid_params(k: int = 2, v: int = 3, b: int = 2, word_bytes: int = 4) -> CodecParams:
    wd = np.dtype(f"<u{word_bytes}")
    top = np.iinfo(wd).max ^ (np.iinfo(wd).max >> 8)  # the top byte
    bitvals = np.zeros((k, v, (1 << b) - 1), dtype=wd)
    bitvals[..., 0] = top & 0x3F << (8 * word_bytes - 8)
    return CodecParams(
        word_bytes=word_bytes,
        masks=np.full((k, v), top, dtype=wd),
        code_bits=np.full((k, v), b, dtype=np.uint8),
        bitvals=bitvals,
    )


def _with_bitval_outside_mask(p: CodecParams) -> dict:
    bv = p.bitvals.copy()
    bv[1, 2, 0] |= 1
    return {"bitvals": bv}


def _with_unused_entry_set(p: CodecParams) -> dict:
    cb = p.code_bits.copy()
    cb[0, 0] = 1  # one entry; entries 1 and 2 of this column must be zero
    bv = p.bitvals.copy()
    bv[0, 0, 2] = bv[0, 0, 0]
    return {"code_bits": cb, "bitvals": bv}


INVALID = {
    "bitvals outside mask": (_with_bitval_outside_mask, "outside"),
    "unused entry non-zero": (_with_unused_entry_set, "must be zero"),
    "code_bits 0": (lambda p: {"code_bits": np.zeros_like(p.code_bits)}, "code_bits"),
    "code_bits 9": (lambda p: {"code_bits": np.full_like(p.code_bits, 9)}, "code_bits"),
    "code_bits shape": (lambda p: {"code_bits": p.code_bits[:, :2]}, "code_bits"),
    "code_bits dtype": (lambda p: {"code_bits": p.code_bits.astype(np.int64)}, "code_bits"),
    "masks 1-D": (lambda p: {"masks": p.masks[0]}, "masks"),
    "masks dtype": (lambda p: {"masks": p.masks.astype(np.uint64)}, "masks"),
    "no clusters": (lambda p: {"masks": p.masks[:0]}, "clusters"),
    "no words": (lambda p: {"masks": p.masks[:, :0]}, "V >= 1"),
    "too many clusters": (lambda p: {"masks": np.repeat(p.masks[:1], 256, axis=0)}, "clusters"),
    "bitvals entries": (lambda p: {"bitvals": p.bitvals[..., :1]}, "bitvals"),
    "bitvals shape": (lambda p: {"bitvals": p.bitvals[:1]}, "bitvals"),
    "bitvals dtype": (lambda p: {"bitvals": p.bitvals.astype(np.uint64)}, "bitvals"),
    "word_bytes 5": (lambda p: {"word_bytes": 5}, "word_bytes"),
}


def test_valid_params_construct() -> None:
    for word_bytes in (4, 8):
        p = valid_params(word_bytes=word_bytes)
        assert p.num_clusters == 2 and p.num_words == 3 and p.max_entries == 3
        words = np.zeros((2, 3), dtype=p.word_dtype)
        assert same_bits(decode_all(encode(words, p, 8), p), words)


def decode_all(chunk, params: CodecParams) -> np.ndarray:
    starts = np.concatenate(([0], np.cumsum(chunk.sizes)[:-1])).astype(np.int64)
    return decode(rows_stream(chunk.data), starts, chunk.sizes, params)


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_params_raise(case: str) -> None:
    change, match = INVALID[case]
    p = valid_params()
    with pytest.raises(CodecError, match=match):
        dataclasses.replace(p, **change(p))


def test_encode_rejects_bad_alignment_and_words() -> None:
    p = valid_params()
    words = np.zeros((4, 3), dtype=np.uint32)
    for align in (0, 3, 64):
        with pytest.raises(CodecError, match="align"):
            encode(words, p, align)
    with pytest.raises(CodecError, match="do not match"):
        encode(np.zeros((4, 4), dtype=np.uint32), p, 16)
    with pytest.raises(CodecError, match="do not match"):
        encode(np.zeros((4, 3), dtype=np.uint64), p, 16)


def test_fit_rejects_bad_samples() -> None:
    with pytest.raises(ValueError, match="no rows"):
        fit(np.zeros((0, 3), dtype=np.uint32), "float32")
    with pytest.raises(ValueError, match="uint32 or uint64"):
        fit(np.zeros((3, 3), dtype=np.int32), "int32")
    with pytest.raises(ValueError, match="threshold"):
        fit(np.zeros((3, 3), dtype=np.uint32), "float32", threshold=0.4)


# --------------------------------------------------------------------------------------------
# A plain-Python encoder written from the row format in codec.py's docstring
# --------------------------------------------------------------------------------------------


def reference_row(words: list[int], mask, code_bits, bitvals, word_bytes: int) -> tuple[int, int]:
    """One row's bitstream as (value, number of bits), following the documented format."""
    tbits = 8 * word_bytes
    v = len(words)
    codes, payloads = [], []
    for j, w in enumerate(words):
        m, b = int(mask[j]), int(code_bits[j])
        escape = (1 << b) - 1
        code = next((e for e in range(escape) if w & m == int(bitvals[j, e])), escape)
        codes.append((code, b))
        if code == escape:
            payloads.append((w, tbits))
        else:
            free = ~m & ((1 << tbits) - 1)
            packed, k = 0, 0
            for i in range(tbits):
                if free >> i & 1:
                    packed |= (w >> i & 1) << k
                    k += 1
            payloads.append((packed, k))

    def stream(fields: list[tuple[int, int]]) -> tuple[int, int]:
        value, pos = 0, 0
        for f, width in fields:
            assert 0 <= f < 1 << width or (f == 0 and width == 0)
            value |= f << pos
            pos += width
        return value, pos

    flat = stream([(0, 1), *codes, *payloads])
    chunk_bits, sub_fields, grouped_codes = [], [], []
    for c in range(-(-v // 32)):
        subs = [list(range(s, min(s + 8, v))) for s in range(32 * c, min(32 * c + 32, v), 8)]
        marked = [any(codes[j][0] for j in sub) for sub in subs]
        chunk_bits.append((int(any(marked)), 1))
        if any(marked):
            sub_fields += [(int(m), 1) for m in marked]
            grouped_codes += [
                codes[j] for sub, m in zip(subs, marked, strict=True) if m for j in sub
            ]
    grouped = stream([(1, 1), *chunk_bits, *sub_fields, *grouped_codes, *payloads])
    return grouped if grouped[1] < flat[1] else flat


def reference_encode(enc: Encoded) -> tuple[list[int], bytes]:
    p = enc.params
    vt = p.num_words * p.word_bytes
    raw_size = -(-vt // enc.align) * enc.align
    sizes, out = [], b""
    for i, row in enumerate(enc.words):
        c = 0 if enc.cluster is None else int(enc.cluster[i])
        value, nbits = reference_row(
            [int(w) for w in row], p.masks[c], p.code_bits[c], p.bitvals[c], p.word_bytes
        )
        nbytes = -(-nbits // 8)
        size = -(-nbytes // enc.align) * enc.align
        if size >= raw_size:
            size, data = raw_size, row.tobytes()
        else:
            data = value.to_bytes(nbytes, "little")
        sizes.append(size)
        out += data.ljust(size, b"\0")
    return sizes, out


@settings(max_examples=150)
@given(enc=arbitrary_params(max_n=16, max_v=70))
def test_encode_matches_the_documented_format(enc: Encoded) -> None:
    """Byte for byte: field order, flat on ties, raw fallback, zero padding to the alignment."""
    sizes, data = reference_encode(enc)
    assert enc.chunk.sizes.tolist() == sizes
    assert enc.chunk.data.tobytes() == data


def test_code_lookup_table_agrees_with_matching(rng: np.random.Generator) -> None:
    """Masks that are one short run take the lookup-table path; it must give the same codes."""
    from ibp_graph import codec

    k, v = 2, 40
    lo = rng.integers(0, 20, (k, v))
    width = rng.integers(1, 13, (k, v))
    masks = (((1 << width) - 1) << lo).astype(np.uint32)
    code_bits = rng.integers(1, 6, (k, v)).astype(np.uint8)
    e = (1 << int(code_bits.max())) - 1
    bitvals = np.zeros((k, v, e), dtype=np.uint32)
    for c in range(k):
        for j in range(v):
            n = (1 << int(code_bits[c, j])) - 1
            bitvals[c, j, :n] = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    bitvals &= masks[:, :, None]
    params = codec.CodecParams(word_bytes=4, masks=masks, code_bits=code_bits, bitvals=bitvals)
    assert params.field_lut is not None
    words = rng.integers(0, 2**32, (300, v), dtype=np.uint64).astype(np.uint32)
    pick = rng.integers(0, e, (300, v))
    hit = rng.random((300, v)) < 0.7  # most words match an entry
    cl = rng.integers(0, k, 300)
    chosen = bitvals[cl[:, None], np.arange(v)[None, :], pick]
    words = np.where(hit, (words & ~masks[cl]) | chosen, words)
    rp = codec._row_params(params, cl)
    got = codec._codes(words, rp, params)
    masked = words & masks[cl]
    want = np.broadcast_to(params.escape[cl], words.shape).copy()
    for ent in range(e - 1, -1, -1):
        entry = bitvals[cl[:, None], np.arange(v)[None, :], ent]
        ok = (masked == entry) & (params.escape[cl] > ent)
        want = np.where(ok, ent, want)
    assert np.array_equal(got.astype(np.int64), want)
