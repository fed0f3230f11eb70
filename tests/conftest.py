"""Shared fixtures, hypothesis profiles and helpers of the test suite.

Helpers are plain functions so that test modules can import them (``from conftest import
...``); fixtures wrap the ones that hold state (seeded generators, files).

Hypothesis runs derandomized (the same examples on every run and every machine) under the
``ibp`` profile; ``HYPOTHESIS_PROFILE=ibp-thorough`` runs ten times more examples locally.
"""

from __future__ import annotations

import os

# Idle OpenMP threads sleep instead of spinning. The suite runs processes side by side
# (pytest-xdist's workers, the sanitized runs, the ranks of the distributed tests), and torch's
# spinning threads took the cores from them: a fetch benchmark test beside two busy processes
# used 2.6 times the CPU time it needs. libgomp reads this as torch loads, hence before the
# imports below; subprocesses inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import ctypes
import json
import re
import shutil
import struct
import tempfile
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from simt import harness, sanitize
from simt.harness import HarnessBuildError
from simt.harness import build as build_harness

from ibp_graph.bitops import exclusive_cumsum
from ibp_graph.codec import CodecParams, EncodedChunk, align_up, best_clusters, decode, encode
from ibp_graph.dtypes import SUPPORTED_DTYPES, rows_to_words
from ibp_graph.preprocess import fit

settings.register_profile(
    "ibp",
    derandomize=True,
    deadline=None,
    max_examples=50,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ibp-thorough",
    parent=settings.get_profile("ibp"),
    max_examples=500,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ibp"))

# --------------------------------------------------------------------------------------------
# One build of each host harness for the whole run
# --------------------------------------------------------------------------------------------

#: The folder of the run's harness builds, where this process made it (and removes it).
HARNESS_CACHE = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Give the run a folder of harness builds (`simt.harness.CACHE_ENV`) unless one is set.

    The pytest-xdist workers, the sanitized runs and the tests' own subprocesses inherit it,
    so each build of the harness (plain, each sanitizer, each set of macros) compiles once in
    the run, where each process compiled its own (the address sanitizer's takes about 40 s).
    """
    if not os.environ.get(harness.CACHE_ENV):
        folder = Path(tempfile.mkdtemp(prefix="ibp-graph-harness-"))
        os.environ[harness.CACHE_ENV] = str(folder)
        config.stash[HARNESS_CACHE] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(HARNESS_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get(harness.CACHE_ENV) == str(folder):
            del os.environ[harness.CACHE_ENV]


# --------------------------------------------------------------------------------------------
# The host kernel tests under the sanitizers, beside the suite
# --------------------------------------------------------------------------------------------

#: The test that waits for the sanitized runs (tests/test_kernels_sanitized.py).
SANITIZED_TEST = "test_host_kernel_tests_pass_under_the_sanitizer"
#: The runs of `sanitize.start_ci_runs`, and their folder, in the starter's stash.
SANITIZED_RUNS = pytest.StashKey[tuple[list, Path]]()


def _xdist_sanitized_folder(testrunuid: str) -> Path:
    """The sanitized runs' folder of a pytest-xdist run: its controller's and every worker's."""
    return Path(tempfile.gettempdir()) / f"ibp-graph-sanitized-{testrunuid}"


def _start_sanitized_runs(config: pytest.Config, nodeids: list[str], folder: Path | None) -> None:
    """Start the sanitized runs the tests ``nodeids`` include a wait for, writing in ``folder``
    (a new temporary folder if None)."""
    chosen = [m.group(1) for i in nodeids if (m := re.search(rf"{SANITIZED_TEST}\[(.+)\]$", i))]
    if chosen and not config.option.collectonly:
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="ibp-graph-sanitized-"))
        folder.mkdir(exist_ok=True)
        config.stash[SANITIZED_RUNS] = (sanitize.start_ci_runs(chosen, folder), folder)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the sanitized runs that collected tests wait for, now, beside the whole suite.

    Each is a process of a few minutes; started before the first test, they use core time the
    suite leaves idle instead of adding their time to its end. Not under ``--collect-only``;
    under pytest-xdist (``-n``), the controller starts them
    (`pytest_xdist_node_collection_finished`), not each worker.
    """
    if not hasattr(session.config, "workerinput"):
        _start_sanitized_runs(session.config, [item.nodeid for item in session.items], None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """pytest-xdist's controller, as its first worker has collected: start the sanitized runs."""
    if node.config.stash.get(SANITIZED_RUNS, None) is None:
        folder = _xdist_sanitized_folder(node.workerinput["testrunuid"])
        _start_sanitized_runs(node.config, list(ids), folder)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker a core, at most 4 (each holds torch, PyG and DGL: about 1 GB)."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def pytest_sessionfinish(session: pytest.Session) -> None:
    started = session.config.stash.get(SANITIZED_RUNS, None)
    if started is not None:
        runs, folder = started
        sanitize.stop_runs(runs)
        shutil.rmtree(folder, ignore_errors=True)


def spread_cases(items: list[pytest.Item], n: int) -> list[pytest.Item]:
    """At most ``n`` cases of each test function, spread over its parametrisations in order:
    the first, the last and evenly between (``n`` >= 2); tests keep their order."""
    cases: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        key = (str(item.path), getattr(item, "originalname", item.name))
        cases.setdefault(key, []).append(item)
    kept = set()
    for group in cases.values():
        last = len(group) - 1
        picks = (
            range(len(group)) if len(group) <= n else (round(k * last / (n - 1)) for k in range(n))
        )
        kept.update(id(group[i]) for i in picks)
    return [item for item in items if id(item) in kept]


def _keep(config: pytest.Config, items: list[pytest.Item], keep: list[pytest.Item]) -> None:
    kept = {id(item) for item in keep}
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
    items[:] = keep


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``IBP_GRAPH_TEST_CASES=n`` keeps at most n cases of each test function (`spread_cases`);
    then ``IBP_GRAPH_TEST_SHARD=i/n`` keeps the i-th of every n selected tests (i from 1).

    The sanitized runs beside the suite take a spread of each host kernel test's cases
    (`sanitize.CI_CASES`). The GPU session script splits the slowest sanitizer run (racecheck,
    over the fused fetch's tests) over n processes at once with the shards; the n shards
    together run each test once.
    """
    cases = os.environ.get("IBP_GRAPH_TEST_CASES")
    if cases:
        if not cases.isdigit() or int(cases) < 2:
            raise pytest.UsageError(f"IBP_GRAPH_TEST_CASES must be a number >= 2, got {cases!r}")
        _keep(config, items, spread_cases(items, int(cases)))
    shard = os.environ.get("IBP_GRAPH_TEST_SHARD")
    if not shard:
        return
    try:
        i, n = (int(s) for s in shard.split("/"))
    except ValueError:
        i = n = 0
    if not 1 <= i <= n:
        raise pytest.UsageError(f"IBP_GRAPH_TEST_SHARD must be i/n with 1 <= i <= n, got {shard!r}")
    _keep(config, items, items[i - 1 :: n])


@pytest.fixture(scope="session")
def sanitized_runs(request) -> Path:
    """The folder of the sanitized runs started at collection (`sanitize.start_ci_runs`)."""
    started = request.config.stash.get(SANITIZED_RUNS, None)
    if started is not None:
        return started[1]
    return _xdist_sanitized_folder(request.config.workerinput["testrunuid"])


# --------------------------------------------------------------------------------------------
# Element types and bit patterns
# --------------------------------------------------------------------------------------------

#: Every element type a table may have, by our name.
DTYPE_NAMES: tuple[str, ...] = tuple(SUPPORTED_DTYPES)
FLOAT_NAMES = ("float32", "float16", "bfloat16", "float64")
#: Unsigned type with the width of each element type (its raw bit patterns).
BITS_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(f"<u{dt.itemsize}") for name, dt in SUPPORTED_DTYPES.items()
}

#: Interesting bit patterns per element width: NaNs with payloads, -0.0, +-inf, subnormals,
#: largest finite values (floats); extremes, -1 and 1 (integers).
SPECIAL_BITS: dict[str, list[int]] = {
    name: [int(h, 16) for h in hexes.split()]
    for name, hexes in {
        "float32": "7FC12345 FFC00001 7F800001 80000000 7F800000 FF800000 00000001 807FFFFF "
        "7F7FFFFF 3F800000",
        "float16": "7E01 FE55 7C01 8000 7C00 FC00 0001 83FF 7BFF 3C00",
        "bfloat16": "7FC1 FFC3 7F81 8000 7F80 FF80 0001 807F 7F7F 3F80",
        "float64": "7FF8000012345678 FFF0000000000001 8000000000000000 7FF0000000000000 "
        "FFF0000000000000 0000000000000001 800FFFFFFFFFFFFF 7FEFFFFFFFFFFFFF 3FF0000000000000",
    }.items()
}
for _name, _dt in SUPPORTED_DTYPES.items():
    if _name not in SPECIAL_BITS:
        _info = np.iinfo(_dt)
        _vals = np.array([_info.min, _info.max, -1 if _info.min else 0, 1, 0], dtype=_dt)
        SPECIAL_BITS[_name] = [int(b) for b in _vals.view(BITS_DTYPES[_name])]

#: Value distributions of `make_table`.
TABLE_KINDS = ("bits", "sparse", "few", "normal", "specials", "mixed", "zeros")


def one_value(name: str) -> int:
    """Bit pattern of the value 1 in an element type."""
    if name == "bfloat16":
        return 0x3F80
    return int(np.array([1], dtype=SUPPORTED_DTYPES[name]).view(BITS_DTYPES[name])[0])


def from_bits(bits: np.ndarray, name: str) -> np.ndarray:
    """Reinterpret raw bit patterns as the storage dtype of ``name`` (no copy)."""
    return np.asarray(bits, dtype=BITS_DTYPES[name]).view(SUPPORTED_DTYPES[name])


def _random_bits(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    dt = BITS_DTYPES[name]
    return rng.integers(0, np.iinfo(dt).max, size=shape, dtype=dt, endpoint=True)


def _normal(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Bits of normally distributed values (rounded and clipped for integer types)."""
    if name == "bfloat16":
        f = rng.normal(size=shape).astype(np.float32)
        return (f.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    dt = SUPPORTED_DTYPES[name]
    if dt.kind == "f":
        return rng.normal(size=shape).astype(dt).view(BITS_DTYPES[name])
    info = np.iinfo(dt)
    v = np.clip(np.rint(rng.normal(scale=20.0, size=shape)), info.min, info.max)
    return v.astype(dt).view(BITS_DTYPES[name])


def make_table(rng: np.random.Generator, name: str, n: int, d: int, kind: str) -> np.ndarray:
    """A ``(n, d)`` table in the storage dtype of ``name`` (bfloat16 as uint16 bits).

    Kinds: ``bits`` (uniform random bit patterns: NaN payloads, infinities and subnormals
    occur), ``sparse`` (zeros with about 5% ones), ``few`` (three distinct values),
    ``normal`` (normal floats / small integers), ``specials`` (NaN payloads, -0.0, +-inf,
    subnormals, extremes among zeros and normals), ``mixed`` (each row from one of zeros,
    sparse, normal and random bits, so that raw, flat and grouped rows meet) and ``zeros``.
    """
    dt = BITS_DTYPES[name]
    shape = (n, d)
    if kind == "bits":
        bits = _random_bits(rng, name, shape)
    elif kind == "sparse":
        bits = np.where(rng.random(shape) < 0.05, one_value(name), 0).astype(dt)
    elif kind == "few":
        pool = _random_bits(rng, name, (3,))
        bits = pool[rng.integers(0, 3, size=shape)]
    elif kind == "normal":
        bits = _normal(rng, name, shape)
    elif kind == "specials":
        pool = np.array(SPECIAL_BITS[name], dtype=dt)
        bits = np.where(rng.random(shape) < 0.5, 0, _normal(rng, name, shape)).astype(dt)
        pick = rng.random(shape) < 0.2
        bits[pick] = pool[rng.integers(0, pool.size, size=int(pick.sum()))]
    elif kind == "mixed":
        parts = [
            np.zeros(shape, dtype=dt),
            np.where(rng.random(shape) < 0.05, one_value(name), 0).astype(dt),
            _normal(rng, name, shape),
            _random_bits(rng, name, shape),
        ]
        which = rng.integers(0, len(parts), size=n)
        bits = np.choose(which[:, None], parts).astype(dt)
    elif kind == "zeros":
        bits = np.zeros(shape, dtype=dt)
    else:  # pragma: no cover - a typo in a test
        raise ValueError(f"unknown table kind {kind!r}")
    return from_bits(bits, name)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality of two arrays of the same shape and item size (NaN-safe)."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    return (
        a.shape == b.shape
        and a.dtype.itemsize == b.dtype.itemsize
        and a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()
    )


def to_torch(x: np.ndarray, name: str) -> torch.Tensor:
    """The torch tensor of a storage-dtype table (bfloat16 from its uint16 bits)."""
    if name == "bfloat16":
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def torch_bits(t: torch.Tensor) -> np.ndarray:
    """Raw bits of a CPU tensor as a NumPy array (bfloat16 through int16)."""
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy()


# --------------------------------------------------------------------------------------------
# Codec round trips
# --------------------------------------------------------------------------------------------


@dataclass
class Encoded:
    """A table encoded at codec level, with what decoding it needs."""

    words: np.ndarray
    params: CodecParams
    cluster: np.ndarray | None
    chunk: EncodedChunk
    align: int

    @property
    def starts(self) -> np.ndarray:
        """First byte of each row."""
        return exclusive_cumsum(self.chunk.sizes)

    @property
    def lengths(self) -> np.ndarray:
        """Stored bytes of each row."""
        return self.chunk.sizes

    @property
    def stream(self) -> np.ndarray:
        """The row bytes zero-padded to whole uint64 words (at least one)."""
        return rows_stream(self.chunk.data)

    @property
    def raw_row_bytes(self) -> int:
        """V * T, the unaligned raw row."""
        return self.params.num_words * self.params.word_bytes

    @property
    def aligned_raw(self) -> int:
        """The aligned raw row, ``align_up(V * T, align)``."""
        return int(align_up(self.raw_row_bytes, self.align))

    def decode(self, ids: np.ndarray | None = None, lengths: np.ndarray | None = None):
        """Decode rows ``ids`` (all by default) back to words."""
        ids = np.arange(self.words.shape[0]) if ids is None else np.asarray(ids, dtype=np.int64)
        lens = self.lengths if lengths is None else lengths
        cl = None if self.cluster is None else self.cluster[ids]
        return decode(self.stream, self.starts[ids], lens[ids], self.params, cl)

    def grouped(self) -> np.ndarray:
        """Encoded rows whose first bit (G) says grouped."""
        first = self.chunk.data[self.starts[~self.chunk.raw]] & 1
        out = np.zeros(self.words.shape[0], dtype=bool)
        out[~self.chunk.raw] = first.astype(bool)
        return out


def rows_stream(data: np.ndarray) -> np.ndarray:
    """Row bytes zero-padded to a multiple of 8 (at least 8) and viewed as uint64."""
    padded = np.zeros(max(8, -(-data.size // 8) * 8), dtype=np.uint8)
    padded[: data.size] = data
    return padded.view(np.uint64)


def encode_words(
    words: np.ndarray,
    name: str,
    *,
    align: int = 16,
    clusters: int = 1,
    fit_rows: np.ndarray | None = None,
    threshold: float | str = "auto",
) -> Encoded:
    """Fit parameters on ``words[fit_rows]`` (all rows by default) and encode every row."""
    sample = words if fit_rows is None else words[fit_rows]
    params = fit(sample, name, clusters=clusters, threshold=threshold, align=align).params
    cluster = best_clusters(words, params)[0] if params.num_clusters > 1 else None
    return Encoded(words, params, cluster, encode(words, params, align, cluster), align)


def encode_table(x: np.ndarray, name: str, word_bytes: int = 4, **kw) -> Encoded:
    """`encode_words` of a storage-dtype table."""
    return encode_words(rows_to_words(x, name, word_bytes), name, **kw)


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture
def rng() -> np.random.Generator:
    """A freshly seeded generator (seed 0) for each test."""
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def sparse_table() -> np.ndarray:
    """200 x 1433 float32 0/1 table with 1.3% ones (a Cora-like bag of words)."""
    gen = np.random.default_rng(1433)
    return (gen.random((200, 1433)) < 0.013).astype(np.float32)


@pytest.fixture
def nvrtc():
    """CuPy's NVRTC module (the dev extra), which compiles the kernels; the test skips without."""
    from ibp_graph.kernels import ptx

    try:
        return ptx.nvrtc()
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def lib(tmp_path_factory) -> ctypes.CDLL:
    """The kernels of ``cuda/*.cu`` built for the host by g++ with the SIMT harness."""
    try:
        return build_harness(tmp_path_factory.mktemp("simt") / "libsimt.so")
    except HarnessBuildError as exc:
        if exc.unsupported:
            pytest.skip(str(exc)[:300])
        pytest.fail(str(exc))


def run_docstring_example(doc: str, stop: str, name: str) -> None:
    """Execute the first ``.. code-block:: python`` of a module docstring, up to ``stop``."""
    code = doc.split(".. code-block:: python\n")[1].split(stop)[0]
    code = "\n".join(line[4:] for line in code.splitlines())
    exec(compile(code, name, "exec"), {})


#: Rows of each real table that the kernel tests compress (a random subset keeps them quick).
REAL_TABLE_ROWS = 800


@pytest.fixture(scope="session")
def real_table_rows() -> list[tuple[str, np.ndarray]]:
    """(name, up to `REAL_TABLE_ROWS` random rows) of every real table of ../shared/datasets."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, under any runner
    from benchmarks import real_tables

    if not real_tables.available():
        pytest.skip(
            f"real datasets not found under {real_tables.SHARED_DATASETS} "
            "(set IBP_GRAPH_DATASETS to the shared/datasets folder)"
        )
    pytest.importorskip("scipy", reason="the derived SVD tables need SciPy")
    rng = np.random.default_rng(0)
    out = []
    for name, x, _note in real_tables.load_all():
        pick = np.sort(rng.choice(x.shape[0], min(REAL_TABLE_ROWS, x.shape[0]), replace=False))
        out.append((name, np.ascontiguousarray(x[pick])))
    return out


def homophilous_graph(
    seed: int, n: int, e: int, d: int, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator]:
    """A random homophilous multigraph with sparse 0/1 features and learnable labels.

    Labels are a random linear function of the features; every edge's source has its
    target's label; the last 5 nodes are isolated. Returns ``(x, y, src, dst, generator)``,
    the generator left where it stopped, for the caller's extra attributes.
    """
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, d, generator=gen) < 0.08).float()
    y = (x @ torch.randn(d, num_classes, generator=gen)).argmax(1)
    linked = y[: n - 5]
    by_class = torch.argsort(linked, stable=True)
    counts = torch.bincount(linked, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    dst = torch.randint(0, n - 5, (e,), generator=gen)
    pick = (torch.rand(e, generator=gen) * counts[y[dst]]).long()
    src = by_class[starts[y[dst]] + pick]
    return x, y, src, dst, gen


@pytest.fixture(params=["compiled", "torch-ops"])
def hop_path(request, monkeypatch) -> str:
    """Run a sampler test with the compiled CPU hop (Numba), then with the torch-ops hop."""
    from ibp_graph import sample_cpu
    from ibp_graph import sampler as sampler_mod

    if request.param == "torch-ops":
        monkeypatch.setattr(sampler_mod, "_COMPILED", False)
    elif not sample_cpu.available():
        pytest.skip("the compiled hop needs Numba")
    return request.param


def random_graph(seed: int, n: int = 60, e: int = 400, isolated: int = 5) -> torch.Tensor:
    """A random multigraph edge_index on ``n`` nodes; the last ``isolated`` nodes have no edges."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, n - isolated, (2, e), generator=gen)


def in_lists(edge_index: torch.Tensor, n: int) -> list[list[tuple[int, int]]]:
    """For each node, its (source, edge id) pairs in edge (CSR) order."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for e, (u, v) in enumerate(edge_index.t().tolist()):
        out[v].append((u, e))
    return out


def reference_sample(edge_index, n, seeds, hops, *, disjoint=False, per_hop=False):
    """Plain-Python sampling with every fanout -1, as pyg-lib (disjoint) and DGL (per_hop) do."""
    adj = in_lists(edge_index, n)
    keys = [(i if disjoint else 0, s) for i, s in enumerate(seeds)]
    local: dict[tuple[int, int], int] = {}
    for i, k in enumerate(keys):
        local.setdefault(k, i)
    row, col, edge, nsn, nse = [], [], [], [len(seeds)], []
    begin, end = 0, len(keys)
    for _ in range(hops):
        count = 0
        for t in range(0 if per_hop else begin, end):
            b, v = keys[t]
            for u, e in adj[v]:
                if (b, u) not in local:
                    local[(b, u)] = len(keys)
                    keys.append((b, u))
                row.append(local[(b, u)])
                col.append(t)
                edge.append(e)
                count += 1
        nsn.append(len(keys) - end)
        nse.append(count)
        begin, end = end, len(keys)
    node = [v for _, v in keys]
    batch = [b for b, _ in keys]
    return node, batch, row, col, edge, nsn, nse


def set_header_stats(path: Path, stats: object) -> None:
    """Rewrite the ``meta.stats`` of the ``.ibp`` file at ``path``, with a valid header CRC."""
    from ibp_graph.container import read_header

    hdr = read_header(path)
    raw = path.read_bytes()
    header = json.loads(raw[24 : hdr.data_start].decode())
    header["meta"]["stats"] = stats
    text = json.dumps(header).encode()
    text += b" " * (hdr.data_start - 24 - len(text))
    crc = struct.pack("<IQ", zlib.crc32(text), len(text))
    path.write_bytes(raw[:12] + crc + text + raw[hdr.data_start :])


# --------------------------------------------------------------------------------------------
# Locks a prefetch thread waits for
# --------------------------------------------------------------------------------------------


def close_while_its_thread_waits(lock, call, timeout: float = 10.0):
    """Close a background producer whose thread runs ``call()``, which waits for ``lock``,
    while this thread holds ``lock`` (as when the garbage collector finalises an abandoned
    iterator on a thread in the middle of a batch). Fails if the close waits for the thread.
    Returns the producer, closed."""
    from ibp_graph.producer import BackgroundProducer

    asked = threading.Event()

    def produce():
        asked.set()
        return True, call()

    with lock:
        producer = BackgroundProducer(produce, 1)
        assert asked.wait(timeout)
        closer = threading.Thread(target=producer.close, daemon=True)
        closer.start()
        closer.join(timeout)
        assert not closer.is_alive(), "close() waited for a thread that waits for our lock"
    assert not producer._thread.is_alive()
    return producer
