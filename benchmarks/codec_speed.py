"""CPU encoder and decoder throughput on one core, and the compiled decoder's on more.

Usage::

    .venv/bin/python benchmarks/codec_speed.py

writes benchmarks/results/codec_speed-cpu.{json,md}.

Tables: 200,000 x 128 float32 drawn from N(0, 1) (dense, about 1.16x), the same shape with 5%
non-zeros (sparse), the bundled Cora bag-of-words rows (5,732 B, about 123x), and the derived
Facebook SVD-100 float32 table when ../shared/datasets is there. Measured after a warm-up:
``ibp_graph.compress`` end to end (sample, fit, encode, write the file) and the encoder alone
on the fitted parameters; the table's decoding of random row ids (with repeats, unsorted;
`RANDOM_BYTES` of raw rows: 100,000 rows of the 128-wide tables, 8,932 of Cora's) and of
every row, in two side-by-side pairs on the same ids, alternating which goes
first: the compiled decoder (`ibp_graph.decode_cpu`, what a table uses with Numba) on one
thread against itself with ``torch.set_num_threads(THREADS)`` (a table shares a large
request's rows between that many threads), then against the NumPy reference
(`ibp_graph.codec.decode`, what it uses without), all checked bit for bit. Each figure is the
median of 5 runs. MB/s counts raw (decoded) bytes. BLAS/OpenMP threads are pinned to 1 before
NumPy loads: apart from the THREADS column, per-core numbers.
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import contextlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
torch.set_num_threads(1)

import ibp_graph  # noqa: E402
from benchmarks import real_tables  # noqa: E402
from benchmarks._env import add_out, environment, header_lines, write_json_md  # noqa: E402
from ibp_graph import decode_cpu  # noqa: E402
from ibp_graph.codec import encode  # noqa: E402
from ibp_graph.compress import ENCODE_BATCH_WORDS  # noqa: E402
from ibp_graph.dtypes import rows_to_words  # noqa: E402

REPEATS = 5
ROWS = 200_000
#: Raw bytes of the random rows decoded: 100,000 rows of 512 B. The same for every table,
#: so that a wide table's request (Cora's 5,732 B rows) is not an 11 times larger output,
#: whose first-touch page faults would dominate its time.
RANDOM_BYTES = 100_000 * 512
#: The thread count the compiled decoder is timed at besides one.
THREADS = 2


def tables() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((ROWS, 128), dtype=np.float32)
    sparse = np.where(rng.random((ROWS, 128)) < 0.05, dense, np.float32(0))
    out = [("normal-200000x128-float32", dense), ("sparse5pct-200000x128-float32", sparse)]
    from ibp_graph.datasets import load_dataset

    out.append(("cora-bow-float32", load_dataset("cora").x.numpy()))
    if real_tables.available():
        name, array, _ = real_tables.load_facebook_svd()
        out.append((name, array))
    return out


@contextlib.contextmanager
def decoder(name: str):
    """Tables decode with ``name``: "compiled" (with Numba, the default), "threads" (the same
    on `THREADS` threads) or "reference" (the NumPy decoder, as where Numba does not import)."""
    real, threads = decode_cpu.available, torch.get_num_threads()
    if name == "reference":
        decode_cpu.available = lambda: False
    elif name == "threads":
        torch.set_num_threads(THREADS)
    try:
        yield
    finally:
        decode_cpu.available = real
        torch.set_num_threads(threads)


def side_by_side(fn, ways: tuple[str, str], repeats: int = REPEATS) -> dict[str, float]:
    """Median seconds of ``fn`` decoded each of two ways, alternating which runs first."""
    for name in ways:  # warm-up (and the compile)
        with decoder(name):
            fn()
    times: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(repeats):
        for name in ways if r % 2 == 0 else ways[::-1]:
            with decoder(name):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def timed(fn, repeats: int = REPEATS) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(name: str, array: np.ndarray, tmp: Path) -> dict:
    path = tmp / f"{name}.ibp"
    mb = array.nbytes / 1e6
    t_compress = timed(lambda: ibp_graph.compress(array, path).close())
    table = ibp_graph.open(path)
    words = rows_to_words(array, "float32", 4)
    per = max(1, ENCODE_BATCH_WORDS // words.shape[1])

    def encode_all() -> None:
        for s in range(0, words.shape[0], per):
            encode(words[s : s + per], table.params, table.align)

    t_encode = timed(encode_all)
    count = RANDOM_BYTES // (array.shape[1] * array.itemsize)
    ids = np.random.default_rng(1).integers(0, array.shape[0], count)
    for name_ in ("compiled", "threads", "reference"):
        with decoder(name_):
            assert np.array_equal(table.read(ids).view(np.uint32), array[ids].view(np.uint32))
            assert np.array_equal(table.read().view(np.uint32), array.view(np.uint32))
    # One thread against THREADS first, then against the reference: a decode right after the
    # reference's (gigabytes of temporaries freed) can run slower, so the thread counts are
    # compared before the reference runs at all.
    threads_random = side_by_side(lambda: table.read(ids), ("compiled", "threads"))
    threads_all = side_by_side(lambda: table.read(), ("compiled", "threads"))
    t_random = side_by_side(lambda: table.read(ids), ("compiled", "reference"))
    t_all = side_by_side(lambda: table.read(), ("compiled", "reference"))
    mb_random = ids.size * array.shape[1] * 4 / 1e6
    result = {
        "table": name,
        "shape": list(array.shape),
        "ratio": table.ratio,
        "align": table.align,
        "random_ids": int(ids.size),
        "compress_mb_s": mb / t_compress,
        "encode_mb_s": mb / t_encode,
        "decode_random_mb_s": mb_random / t_random["compiled"],
        "decode_all_mb_s": mb / t_all["compiled"],
        "reference_decode_random_mb_s": mb_random / t_random["reference"],
        "reference_decode_all_mb_s": mb / t_all["reference"],
        "threads": THREADS,
        "threads_decode_random_mb_s": mb_random / threads_random["threads"],
        "threads_decode_all_mb_s": mb / threads_all["threads"],
        "threads_over_one_random": threads_random["compiled"] / threads_random["threads"],
        "threads_over_one_all": threads_all["compiled"] / threads_all["threads"],
    }
    table.close()
    return result


def markdown(env: dict, rows: list[dict]) -> str:
    lines = [
        *header_lines(f"CPU codec throughput (one core; the decoder also on {THREADS})", env),
        "MB/s of raw (decoded) table bytes, median of 5 runs after a warm-up, one thread "
        "but in the last column. Decoding in two side-by-side pairs, alternating which goes "
        "first: the compiled decoder (`ibp_graph.decode_cpu`, a table's with Numba) on one "
        f"thread against itself on {THREADS} (`torch.set_num_threads({THREADS})`), then "
        "against the NumPy reference (`ibp_graph.codec.decode`, without). Targets: encoder "
        ">= 50 MB/s, decoder >= 100 MB/s per core. Ratios: compiled over reference, and on "
        f"{THREADS} threads over one thread in the same pair.",
        "",
        "| table | ratio | align | compress() end to end | encoder only | decode random ids: "
        "compiled, reference (ratio) | decode all rows: compiled, reference (ratio) "
        f"| compiled on {THREADS} threads: random ids, all rows (over one thread) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        random_x = r["decode_random_mb_s"] / r["reference_decode_random_mb_s"]
        all_x = r["decode_all_mb_s"] / r["reference_decode_all_mb_s"]
        threads = (
            f"{r['threads_decode_random_mb_s']:.1f} ({r['threads_over_one_random']:.2f}x), "
            f"{r['threads_decode_all_mb_s']:.1f} ({r['threads_over_one_all']:.2f}x)"
        )
        lines.append(
            f"| {r['table']} | {r['ratio']:.3f} | {r['align']} | {r['compress_mb_s']:.1f} "
            f"| {r['encode_mb_s']:.1f} | {r['decode_random_mb_s']:.1f}, "
            f"{r['reference_decode_random_mb_s']:.1f} ({random_x:.2f}x) "
            f"| {r['decode_all_mb_s']:.1f}, {r['reference_decode_all_mb_s']:.1f} ({all_x:.2f}x) "
            f"| {threads} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_out(p)
    args = p.parse_args(argv)
    env = environment()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, array in tables():
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, array, Path(tmp)))
    payload = {**env, "results": rows}
    print(
        write_json_md("codec_speed-cpu", payload, lambda: markdown(env, rows), args.out).read_text()
    )


if __name__ == "__main__":
    main()
