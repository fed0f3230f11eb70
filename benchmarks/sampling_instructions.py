"""Instructions per sampled edge, our CPU sampler against DGL's, counted by callgrind.

Wall time on a shared machine moves with its load; the instructions a batch executes do not.
Each contender of ``benchmarks/sampling.py --compare-dgl`` runs in a process of its own under
``valgrind --tool=callgrind --instr-atstart=no``: it loads the graph and samples its warm-up
batches uninstrumented, then callgrind counts only the measured batches, started, zeroed,
stopped and dumped by client requests (a small library compiled here against valgrind's
``callgrind.h``). One thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``); the
Python around each batch is counted too. Instructions are not time: memory stalls, which
dominate sampling on a large graph, do not show, so these figures stand beside the timed
ratios of ``sampling-cpu.md``, not in their place.

Needs valgrind, a C compiler (``$CC`` or ``cc``) with valgrind's headers, and DGL.

    python benchmarks/sampling_instructions.py   # -> results/sampling-instructions-cpu.{json,md}
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _env import add_out, environment, header_lines, write_json_md  # noqa: E402
from sampling import CONTENDERS, GAMMA, contenders, load_dgl, power_law_edges  # noqa: E402

#: The client requests around the measured batches (valgrind/callgrind.h): no-ops natively.
HELPER_C = """#include <valgrind/callgrind.h>
void ibp_count_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void ibp_count_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("measured"); }
"""
#: The trigger line of the dump `HELPER_C` writes.
DUMP_TRIGGER = "desc: Trigger: Client Request: measured"


def build_helper(folder: Path) -> Path:
    """Compile `HELPER_C` into ``folder``; SystemExit naming what is missing."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("sampling_instructions: needs a C compiler (cc, gcc or $CC)")
    source, lib = folder / "ibp_count.c", folder / "ibp_count.so"
    source.write_text(HELPER_C)
    done = subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(source)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise SystemExit(
            f"sampling_instructions: {cc} could not build the callgrind helper (are valgrind's "
            f"headers, valgrind/callgrind.h, installed?): {first}"
        )
    return lib


def measured_instructions(dump_prefix: Path) -> int:
    """The instruction count of the dump `HELPER_C` triggered, among ``<dump_prefix>*``."""
    for path in sorted(dump_prefix.parent.glob(dump_prefix.name + "*")):
        text = path.read_text(errors="replace")
        if DUMP_TRIGGER in text:
            for line in text.splitlines():
                if line.startswith("totals:"):
                    return int(line.split()[1])
    raise ValueError(f"no callgrind dump of the measured batches under {dump_prefix}*")


def child(args: argparse.Namespace) -> None:
    """One contender's batches, the measured ones between the client requests."""
    torch.set_num_threads(1)
    data = torch.load(args.data)
    sample = contenders(data["edge_index"], args, [args.child])[args.child]
    seeds = data["seeds"]
    for s in seeds[: args.warmup]:
        sample(s)
    lib = ctypes.CDLL(str(args.lib))
    lib.ibp_count_start()
    edges = 0
    for s in seeds[args.warmup :]:
        edges += sample(s)
    lib.ibp_count_stop()
    print(json.dumps({"edges": edges}))


def count(name: str, args: argparse.Namespace, folder: Path, data: Path, lib: Path) -> dict:
    """Run contender ``name`` under callgrind: its instructions and sampled edges."""
    prefix = Path(tempfile.mkdtemp(prefix="count-", dir=folder)) / "callgrind.out"
    cmd = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={prefix}",
        sys.executable, __file__, "--child", name, "--data", str(data), "--lib", str(lib),
        "--nodes", str(args.nodes), "--fanouts", *map(str, args.fanouts),
        "--seed", str(args.seed), "--warmup", str(args.warmup),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SystemExit(f"sampling_instructions: {name} failed under valgrind:\n{tail}")
    edges = json.loads(done.stdout.strip().splitlines()[-1])["edges"]
    try:
        instructions = measured_instructions(prefix)
    except ValueError as exc:  # e.g. a wrapper script ran Python without valgrind watching
        raise SystemExit(
            f"sampling_instructions: {exc}; run this script with the Python interpreter "
            f"itself (not a wrapper script like {sys.executable} may be)"
        ) from exc
    return {
        "contender": name,
        "instructions": instructions,
        "sampled_edges": edges,
        "instructions_per_edge": instructions / edges,
        "run_s": time.perf_counter() - t0,
    }


def markdown(env: dict, payload: dict) -> str:
    rows = payload["results"]
    base = rows[0]["instructions_per_edge"]
    lines = [
        *header_lines("CPU neighbor sampling: instructions per edge against DGL", env),
        f"DGL {payload['dgl_version']}. Graph: {payload['graph']}, {payload['nodes']:,} nodes, "
        f"{payload['edges']:,} edges. Batch size {payload['batch_size']}, fanouts "
        f"{payload['fanouts']} (DGL: {list(reversed(payload['fanouts']))}); per contender "
        f"{payload['batches']} measured batches of distinct random seeds after "
        f"{payload['warmup']} warm-up batches, in a process of its own under `valgrind "
        "--tool=callgrind --instr-atstart=no`, counted between client requests; one thread; "
        "the Python around each batch included. Instructions are not time: memory stalls do "
        "not show (timed ratios: sampling-cpu.md).",
        "",
        "| contender | instructions | sampled edges | instructions per edge | DGL's over ours |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['contender']} | {r['instructions']:,} | {r['sampled_edges']:,} "
            f"| {r['instructions_per_edge']:.0f} | {base / r['instructions_per_edge']:.2f}x |"
        )
    return "\n".join([*lines, ""])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--edges", type=int, default=5_000_000)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    add_out(p)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--lib", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.batches < 1 or args.warmup < 1:
        p.error("--batches and --warmup must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("sampling_instructions: needs valgrind (apt install valgrind)")
    env = environment()
    with tempfile.TemporaryDirectory(prefix="ibp-graph-callgrind-") as tmp:
        folder = Path(tmp)
        lib = build_helper(folder)
        edge_index = power_law_edges(args.nodes, args.edges, args.seed)
        total = args.warmup + args.batches
        gen = torch.Generator().manual_seed(args.seed + 1)
        perm = torch.randperm(args.nodes, generator=gen)[: total * args.batch_size]
        data = folder / "graph.pt"
        torch.save({"edge_index": edge_index, "seeds": perm.view(total, -1)}, data)
        dgl_version = load_dgl().__version__
        results = []
        for name in CONTENDERS:
            results.append(count(name, args, folder, data, lib))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    payload = {
        **env,
        "graph": f"Chung-Lu power law (gamma={GAMMA}), seed {args.seed}",
        "nodes": args.nodes,
        "edges": args.edges,
        "batch_size": args.batch_size,
        "fanouts": args.fanouts,
        "batches": args.batches,
        "warmup": args.warmup,
        "dgl_version": dgl_version,
        "results": results,
    }
    page = write_json_md(
        "sampling-instructions-cpu", payload, lambda: markdown(env, payload), args.out
    )
    print(page.read_text())


if __name__ == "__main__":
    main()
