"""The compiled CPU decoder (`ibp_graph.decode_cpu`) against the NumPy reference, bit for bit."""

from __future__ import annotations

import itertools
import re
import threading

import numpy as np
import pytest
import torch
from conftest import Encoded, encode_table, make_table, same_bits
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_codec import Case, arbitrary_params, cases, shortened

import ibp_graph
from ibp_graph import codec, decode_cpu
from ibp_graph import table as table_module
from ibp_graph.codec import CodecError
from ibp_graph.container import read_header
from ibp_graph.errors import IBPFormatError

pytestmark = pytest.mark.skipif(not decode_cpu.available(), reason="needs Numba")


def both(enc, ids: np.ndarray | None = None, lengths: np.ndarray | None = None):
    """The reference's words and the compiled decoder's, for rows ``ids`` of ``enc``."""
    ids = np.arange(enc.words.shape[0]) if ids is None else np.asarray(ids, dtype=np.int64)
    lens = enc.lengths if lengths is None else lengths
    cl = None if enc.cluster is None else enc.cluster[ids]
    args = (enc.stream, enc.starts[ids], lens[ids], enc.params, cl)
    return codec.decode(*args), decode_cpu.decode(*args)


@settings(max_examples=300)
@given(case=cases(), data=st.data())
def test_the_same_words_as_the_reference(case: Case, data: st.DataObject) -> None:
    """Every dtype, word size, alignment and cluster count; rows in any order, repeated."""
    enc = case.encode()
    want, got = both(enc)
    assert got.dtype == want.dtype and same_bits(got, want) and same_bits(got, enc.words)
    n = enc.words.shape[0]
    ids = data.draw(st.lists(st.integers(0, n - 1), max_size=2 * n))
    want, got = both(enc, ids)
    assert same_bits(got, want)


@settings(max_examples=200)
@given(enc=arbitrary_params())
def test_the_same_words_with_arbitrary_params(enc) -> None:
    """Masks of many runs, code widths 1..8, dictionaries over 15 entries, k up to 4."""
    event(f"dictionary entries > 15: {enc.params.max_entries > 15}")
    want, got = both(enc)
    assert same_bits(got, want) and same_bits(got, enc.words)


@settings(max_examples=100)
@given(case=cases(max_n=30, max_d=30), data=st.data())
def test_a_short_stored_length_is_refused_as_the_reference_refuses_it(
    case: Case, data: st.DataObject
) -> None:
    enc = case.encode()
    cut = shortened(enc, data)
    if cut is None:
        return
    lengths, need = cut
    if need is not None:
        with pytest.raises(CodecError) as ref:
            both(enc, lengths=lengths)
        with pytest.raises(CodecError) as compiled:
            decode_cpu.decode(enc.stream, enc.starts, lengths, enc.params, enc.cluster)
        assert str(compiled.value) == str(ref.value)  # the same row, bits and length
        assert f"needs {need} bits but stores" in str(compiled.value)
    else:  # only alignment padding was cut
        want, got = both(enc, lengths=lengths)
        assert same_bits(got, want)


def test_a_raw_row_past_the_row_section_is_refused() -> None:
    x = np.random.default_rng(3).integers(0, 2**32, (4, 8), dtype=np.uint32).view(np.float32)
    enc = encode_table(x, "float32", align=16)
    assert enc.chunk.raw.all()  # random bits do not compress: every row is stored raw
    starts = enc.starts.copy()
    starts[2] = enc.stream.nbytes - 8  # the row would run past the end
    with pytest.raises(CodecError, match=r"raw row 2 of the request runs past the end"):
        decode_cpu.decode(enc.stream, starts, enc.lengths, enc.params)


def test_no_rows_and_one_word_rows() -> None:
    enc = encode_table(np.ones((5, 1), dtype=np.float32), "float32")
    empty = np.zeros(0, dtype=np.int64)
    out = decode_cpu.decode(enc.stream, empty, empty, enc.params)
    assert out.shape == (0, 1) and out.dtype == enc.params.word_dtype
    want, got = both(enc)
    assert same_bits(got, want)


@pytest.mark.parametrize("clusters", [1, 3])
def test_wide_grouped_rows_of_a_bag_of_words(sparse_table: np.ndarray, clusters: int) -> None:
    """Cora's width: 45 chunks a row, most of them empty, the last one partly."""
    enc = encode_table(sparse_table, "float32", clusters=clusters)
    assert enc.grouped().mean() > 0.5
    ids = np.random.default_rng(0).integers(0, sparse_table.shape[0], 500)
    want, got = both(enc, ids)
    assert same_bits(got, want)


@pytest.mark.parametrize("word_bytes", [4, 8])
def test_subgroups_without_codes_with_and_without_free_bits(word_bytes: int) -> None:
    """A subgroup without codes is copied from its code-0 entries only where none of its
    columns has free bits: one free column (in one cluster) makes its words read payloads."""
    rng = np.random.default_rng(5)
    wd = np.dtype(f"<u{word_bytes}")
    k, v, n = 2, 70, 400  # the last chunk holds 6 words: one short subgroup
    masks = np.full((k, v), np.iinfo(wd).max, dtype=wd)
    masks[0, 9] ^= wd.type(0b111)  # free bits in subgroup 1 of chunk 0, cluster 0 only
    masks[:, 66] ^= wd.type(0b1)  # and in the last, short subgroup, both clusters
    code_bits = np.full((k, v), 2, dtype=np.uint8)
    bitvals = (rng.integers(0, 1 << 16, (k, v, 3)).astype(wd)) & masks[:, :, None]
    cluster = rng.integers(0, k, n).astype(np.uint8)
    words = bitvals[cluster, :, 0].copy()  # code 0 everywhere ...
    free = rng.integers(0, 8, (n, v)).astype(wd) & ~masks[cluster]
    words |= free
    hit = rng.random((n, v)) < 0.01  # ... but for a few words of code 1 and a few escapes
    words[hit] = bitvals[cluster, :, 1][hit] | free[hit]
    odd = rng.random((n, v)) < 0.01
    words[odd] = rng.integers(0, np.iinfo(wd).max, int(odd.sum()), dtype=wd, endpoint=True)
    params = codec.CodecParams(
        word_bytes=word_bytes, masks=masks, code_bits=code_bits, bitvals=bitvals
    )
    enc = Encoded(words, params, cluster, codec.encode(words, params, 16, cluster), 16)
    assert enc.grouped().mean() > 0.5
    want, got = both(enc)
    assert same_bits(got, want) and same_bits(got, words)
    ids = rng.integers(0, n, 600)
    want, got = both(enc, ids)
    assert same_bits(got, want)


def test_the_decoder_releases_the_gil() -> None:
    # Loader workers and prefetch threads decode side by side.
    assert decode_cpu._decode.targetoptions.get("nogil") is True


@pytest.fixture
def small_spans(monkeypatch):
    """Spans of 8 words or more, so that small requests are shared between threads."""
    monkeypatch.setattr(decode_cpu, "MIN_SPAN_WORDS", 8)


@settings(max_examples=60)
@given(case=cases(), data=st.data())
def test_threads_decode_the_same_words(case: Case, data: st.DataObject) -> None:
    enc = case.encode()
    n = enc.words.shape[0]
    ids = np.asarray(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3 * n)))
    cl = None if enc.cluster is None else enc.cluster[ids]
    args = (enc.stream, enc.starts[ids], enc.lengths[ids], enc.params, cl)
    want = decode_cpu.decode(*args)
    with pytest.MonkeyPatch.context() as patch:  # spans of 8 words: small requests are shared
        patch.setattr(decode_cpu, "MIN_SPAN_WORDS", 8)
        for threads in (2, 3, 8):
            assert same_bits(decode_cpu.decode(*args, threads=threads), want)


def test_threads_name_the_request_s_first_bad_row(small_spans) -> None:
    """Rows cut short in two spans, raw rows past the end in two more: the first is named,
    as the reference names it (encoded rows counted among the request's encoded rows)."""
    x = make_table(np.random.default_rng(11), "float32", 400, 16, "mixed")
    enc = encode_table(x, "float32", align=16)
    encoded = np.flatnonzero(~enc.chunk.raw)
    short = encoded[encoded > 150][[0, -1]]  # in a later span than row 0's, and the last one
    lengths = enc.lengths.copy()
    lengths[short] = 0
    with pytest.raises(CodecError) as one:
        decode_cpu.decode(enc.stream, enc.starts, lengths, enc.params)
    with pytest.raises(CodecError) as ref:
        codec.decode(enc.stream, enc.starts, lengths, enc.params)
    assert str(one.value) == str(ref.value)
    rank = int(np.searchsorted(encoded, short[0]))
    assert f"encoded row {rank} of the request" in str(one.value)
    for threads in (2, 4, 16):
        with pytest.raises(CodecError) as many:
            decode_cpu.decode(enc.stream, enc.starts, lengths, enc.params, threads=threads)
        assert str(many.value) == str(one.value)
    raw = np.flatnonzero(enc.chunk.raw)
    past = raw[raw > 200][[0, -1]]
    starts = enc.starts.copy()
    starts[past] = enc.stream.nbytes - 8
    for threads in (1, 4):
        with pytest.raises(CodecError, match=rf"raw row {past[0]} of the request runs past"):
            decode_cpu.decode(enc.stream, starts, enc.lengths, enc.params, threads=threads)


def test_a_table_shares_a_large_request_between_torch_s_threads(monkeypatch, tmp_path) -> None:
    x = make_table(np.random.default_rng(5), "float32", 3000, 40, "sparse")
    path = tmp_path / "t.ibp"
    ibp_graph.compress(x, path, progress=False)
    ids = np.random.default_rng(6).integers(0, 3000, 5000)
    names = set()
    real = decode_cpu._decode
    # The first two spans wait for each other, so they decode at once, on two threads: which
    # threads take which spans is otherwise up to the scheduler (the caller may take them all).
    both_started = threading.Barrier(2, timeout=30)
    calls = itertools.count()

    def spy(*args):
        names.add(threading.current_thread().name)
        if next(calls) < 2:
            both_started.wait()
        return real(*args)

    before = torch.get_num_threads()
    with ibp_graph.open(path) as table:
        try:
            torch.set_num_threads(1)
            one = table.read(ids)
            monkeypatch.setattr(decode_cpu, "_decode", spy)
            monkeypatch.setattr(decode_cpu, "MIN_SPAN_WORDS", 400)  # spans of 10 rows or more
            torch.set_num_threads(4)
            four = table.read(ids)
        finally:
            torch.set_num_threads(before)
    assert same_bits(four, one) and same_bits(one, x[ids])
    assert names - {threading.current_thread().name}  # the pool's threads decoded some spans


# --------------------------------------------------------------------------------------------
# Through the table
# --------------------------------------------------------------------------------------------


def _calls(monkeypatch, module, name: str) -> list[int]:
    """Count the calls of ``module.name`` (still calling it)."""
    calls: list[int] = []
    real = getattr(module, name)

    def spy(rows, starts, *args, **kwargs):
        calls.append(len(starts))
        return real(rows, starts, *args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


@pytest.mark.parametrize("kind", ["mixed", "sparse", "specials"])
def test_a_table_decodes_with_the_compiled_decoder_in_one_call(monkeypatch, tmp_path, kind) -> None:
    x = make_table(np.random.default_rng(5), "float32", 3000, 40, kind)
    path = tmp_path / "t.ibp"
    ibp_graph.compress(x, path, clusters=2, progress=False)
    ids = np.random.default_rng(6).integers(0, 3000, 4000)
    compiled = _calls(monkeypatch, decode_cpu, "decode")
    reference = _calls(monkeypatch, table_module, "decode")
    with ibp_graph.open(path) as table:
        got = table.read(ids)
        assert compiled == [4000] and reference == []  # one call, not batches
        # Without Numba: the reference, in batches of about DECODE_BATCH_WORDS words.
        monkeypatch.setattr(decode_cpu, "available", lambda: False)
        again = table.read(ids)
    per_batch = table_module.DECODE_BATCH_WORDS // 40
    assert reference == [per_batch] * (4000 // per_batch) + [4000 % per_batch]
    assert same_bits(got, again) and same_bits(got, x[ids])


def test_a_corrupt_row_of_a_table_is_refused_naming_the_file(tmp_path) -> None:
    """An encoded row whose bytes are all ones (every chunk, subgroup and code marked, every
    word escaped) needs far more bits than it stores: refused, never returned."""
    x = make_table(np.random.default_rng(7), "float32", 200, 30, "mixed")
    path = tmp_path / "t.ibp"
    ibp_graph.compress(x, path, progress=False)
    with ibp_graph.open(path) as table:
        offsets, align = table._offsets.astype(np.int64), table._align
    sizes = (offsets[1:] - offsets[:-1]) * align
    row = int(np.flatnonzero(sizes < 30 * 4)[0])  # an encoded row
    data = bytearray(path.read_bytes())
    at = read_header(path).sections["rows"].offset + int(offsets[row]) * align
    data[at : at + int(sizes[row])] = b"\xff" * int(sizes[row])
    path.write_bytes(bytes(data))
    with ibp_graph.open(path, verify=False) as table:  # the row section's checksum unchecked
        assert same_bits(table.read([row + 1]), x[[row + 1]])
        with pytest.raises(IBPFormatError, match=re.escape(str(path)) + r": corrupt row data"):
            table.read([row + 1, row])
