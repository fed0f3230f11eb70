"""GPU fetch throughput: pinned memcpy, torch gather, raw zero-copy gather, IBP fetch, decode.

Usage (on a machine with a CUDA GPU, CuPy and the datasets folder optional)::

    python benchmarks/fetch.py [--table-gb 4] [--batch 200000] [--repeats 10]

For row widths of 256 B, 512 B, 1 KiB and 4 KiB and several kinds of rows (synthetic dense
float32 of about 1.16x, sparse float32, incompressible random bits, and the real tables when
../shared/datasets is there), a compressed table of a few GB is made by tiling a compressed
block of distinct rows (so building it takes seconds, and random ids still touch all of it).
For random id batches like a GNN's, it measures, as the median of ``--repeats`` timed runs
after a warm-up, the delivered (decoded) GB/s of:

- ``memcpy``: one pinned host -> device cudaMemcpy of the same number of bytes (the PCIe rate);
- ``torch``: ``index_select`` on a pinned CPU tensor then ``.to("cuda", non_blocking=True)``;
- ``raw``: our raw zero-copy gather from pinned memory (IBP off);
- ``ibp``: our fused fetch + decode from pinned memory;
- ``decode_only``: the same kernel with the rows in GPU memory (no PCIe).

Writes ``benchmarks/results/fetch-<device>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ibp_graph  # noqa: E402
from benchmarks import real_tables  # noqa: E402
from benchmarks._env import RESULTS, environment, header_lines, write_json  # noqa: E402
from ibp_graph.cuda_table import PinnedRawTable  # noqa: E402
from ibp_graph.kernels.fetch_decode import DeviceCodec, fetch_decode  # noqa: E402
from ibp_graph.kernels.runtime import cupy  # noqa: E402
from ibp_graph.pinned import PinnedBuffer  # noqa: E402

WIDTHS = (256, 512, 1024, 4096)
BLOCK_ROWS = 1 << 15


def synthetic(kind: str, row_bytes: int, rng: np.random.Generator) -> np.ndarray:
    d = row_bytes // 4
    if kind == "dense-normal":
        return rng.standard_normal((BLOCK_ROWS, d), dtype=np.float32)
    if kind == "sparse-5pct":
        x = rng.standard_normal((BLOCK_ROWS, d), dtype=np.float32)
        return np.where(rng.random((BLOCK_ROWS, d)) < 0.05, x, np.float32(0))
    if kind == "random-bits":
        return rng.integers(0, 2**32, (BLOCK_ROWS, d), dtype=np.uint32).view(np.float32)
    raise ValueError(kind)


def timed_gbps(fn, nbytes: int, repeats: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return nbytes / statistics.median(times) / 1e9


def tiled_codec(table: ibp_graph.IBPTable, times: int, device: torch.device):
    """A DeviceCodec of ``times`` copies of ``table`` back to back, rows pinned; and a copy."""
    cp = cupy()
    rows = np.asarray(table.rows_section).view(np.uint8)[: table.offsets[-1] * table.align]
    per = rows.size
    buf = PinnedBuffer(per * times, "tiled table", cp.cuda)
    for t in range(times):
        buf.array[t * per : (t + 1) * per] = rows
    ptr = buf.pin()
    unit = per // table.align
    off = table.offsets[:-1][None, :] + unit * np.arange(times)[:, None]
    offsets = np.append(off.reshape(-1), unit * times).astype(np.int64)
    params = table.params
    signed = np.int32 if params.word_bytes == 4 else np.int64
    codec = DeviceCodec(
        rows_ptr=ptr,
        offsets=torch.from_numpy(offsets).to(device),
        cluster_ids=None,
        masks=torch.from_numpy(params.masks.view(signed)).to(device),
        code_bits=torch.from_numpy(params.code_bits).to(device),
        bitvals=torch.from_numpy(params.bitvals.view(signed)).to(device),
        num_rows=table.shape[0] * times,
        num_words=params.num_words,
        word_bytes=params.word_bytes,
        align=table.align,
        row_bytes=table.shape[1] * 4,
    )
    on_gpu = torch.zeros(per * times + 64, dtype=torch.uint8, device=device)
    on_gpu[: per * times] = torch.from_numpy(buf.array[: per * times]).to(device)
    return codec, buf, dataclasses.replace(codec, rows_ptr=on_gpu.data_ptr()), on_gpu


def measure(name: str, block: np.ndarray, args, tmp: Path, device) -> dict:
    table = ibp_graph.compress(block, tmp / "block.ibp")
    row_bytes = block.shape[1] * block.itemsize
    times = max(1, int(args.table_gb * 2**30 // (block.shape[0] * row_bytes)))
    codec, pinned, gpu_codec, keep = tiled_codec(table, times, device)
    n_rows = codec.num_rows
    raw_block = np.ascontiguousarray(block)
    big = np.tile(raw_block, (times, 1))
    raw = PinnedRawTable(big, device=device)
    host = torch.from_numpy(big).pin_memory()
    ids = torch.randint(0, n_rows, (args.batch,), device=device)
    ids_cpu = ids.cpu()
    out = torch.empty((args.batch, block.shape[1]), dtype=torch.float32, device=device)
    err = torch.zeros(2, dtype=torch.int32, device=device)
    nbytes = args.batch * row_bytes
    staging = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)

    result = {
        "table": name,
        "row_bytes": row_bytes,
        "ratio": table.ratio,
        "table_gb": n_rows * row_bytes / 1e9,
        "batch": args.batch,
        "memcpy_gbps": timed_gbps(
            lambda: dst.copy_(staging, non_blocking=True), nbytes, args.repeats
        ),
        "torch_gbps": timed_gbps(
            lambda: host.index_select(0, ids_cpu).to(device, non_blocking=True),
            nbytes,
            args.repeats,
        ),
        "raw_gbps": timed_gbps(lambda: raw.fetch(ids, out, check=False), nbytes, args.repeats),
        "ibp_gbps": timed_gbps(lambda: fetch_decode(codec, ids, out, err), nbytes, args.repeats),
        "decode_only_gbps": timed_gbps(
            lambda: fetch_decode(gpu_codec, ids, out, err), nbytes, args.repeats
        ),
    }
    got = torch.empty_like(out)
    fetch_decode(codec, ids, got, err)
    want = torch.from_numpy(big)[ids_cpu]
    same = torch.equal(got.cpu().view(torch.int32), want.view(torch.int32))
    result["bit_identical"] = bool(same)
    result["errors"] = err.tolist()
    result["ibp_vs_ideal"] = result["ibp_gbps"] / (result["ratio"] * result["raw_gbps"])
    raw.close()
    pinned.close()
    del keep
    return result


def markdown(env: dict, rows: list[dict]) -> str:
    lines = [
        *header_lines("GPU fetch throughput", env),
        "Delivered (decoded) GB/s, median of the timed runs. ideal = ratio x raw; target: "
        "ibp >= 0.9 x ideal, raw >= 0.8 x memcpy at 512 B, decode-only >= 10 x memcpy.",
        "",
        "| table | row bytes | ratio | memcpy | torch | raw | ibp | ibp / ideal | decode only "
        "| bit-identical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['table']} | {r['row_bytes']} | {r['ratio']:.3f} | {r['memcpy_gbps']:.1f} "
            f"| {r['torch_gbps']:.1f} | {r['raw_gbps']:.1f} | {r['ibp_gbps']:.1f} "
            f"| {r['ibp_vs_ideal']:.2f} | {r['decode_only_gbps']:.1f} | {r['bit_identical']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table-gb", type=float, default=4.0)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/fetch.py needs a CUDA GPU")
    device = torch.device("cuda", 0)
    env = environment()
    env["device"] = torch.cuda.get_device_name(device)
    env["cuda"] = torch.version.cuda
    env["cupy"] = cupy().__version__
    rng = np.random.default_rng(0)
    cases = [
        (f"{k}-{w}B", synthetic(k, w, rng))
        for w in WIDTHS
        for k in ("dense-normal", "sparse-5pct", "random-bits")
    ]
    if real_tables.available():
        for name, array, _ in real_tables.load_all():
            if array.dtype == np.float32 and array.shape[1] >= 64:
                reps = -(-BLOCK_ROWS // array.shape[0])
                cases.append((name, np.tile(array, (reps, 1))[:BLOCK_ROWS]))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, block in cases:
            print(f"{name} ...", file=sys.stderr, flush=True)
            rows.append(measure(name, block, args, Path(tmp), device))
    slug = env["device"].replace(" ", "-").lower()
    write_json(f"fetch-{slug}", {**env, "results": rows})
    (RESULTS / f"fetch-{slug}.md").write_text(markdown(env, rows))
    print(markdown(env, rows))


if __name__ == "__main__":
    main()
