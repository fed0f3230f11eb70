"""Every performance target, one line each, judged from the committed results.

Reads the results files under ``benchmarks/results`` (or ``--results``) and writes
``targets.md`` and ``targets.json`` there (or in ``--out``): for each GPU whose results are
present, each performance target with its verdict (`_targets.verdict`: ``met``, the gap, or
``not measured`` where no result holds it), the cases behind it and the file, commit and date
it comes from, and the results behind them, absent or oldest first, with the stage of
``benchmarks/gpu_session.sh`` that measures each anew; then the CPU sampler's target.
Nothing is measured here: run it after the benchmarks (``python benchmarks/scoreboard.py``);
it needs no GPU.

A target is judged on the configuration the library uses by default where a result times
several (the loaders' fetch grid, the hop kernels on a GPU replayed in groups, the prefetch
thread); the detail column says how the others fared. A verdict over several cases is ``met``
only when every case the target applies to meets it, else the largest gap among them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._env import finite, slug, write_json_md  # noqa: E402
from benchmarks._targets import AT_LEAST, check, measured, verdict  # noqa: E402
from benchmarks.overlap import TARGET_SLOWDOWN  # noqa: E402
from ibp_graph.loading import DEFAULT_SAMPLE_GROUP  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

Case = tuple[str, dict]  # (what the case is, its check: `_targets.check`'s dict)


def load(path: Path) -> dict | None:
    """A results file's payload, or None when it is absent or not a JSON object."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def gpu_results(results: Path) -> dict[str, dict[str, tuple[Path, dict]]]:
    """The GPU results under ``results``: {GPU slug: {kind: (path, payload)}}.

    A file is ``<kind>-<slug>.json``, its slug that of the ``gpu`` it records; kinds are the
    part before the slug plus any suffix after it (``fetch``, ``fetch/grid``), and a file in a
    folder (``synthetic/``, ``corasu/``) is that folder's kind (``synthetic/e2e``).
    """
    found: dict[str, dict[str, tuple[Path, dict]]] = {}
    for path in sorted(results.rglob("*.json")):
        payload = load(path)
        if payload is None or not payload.get("gpu"):
            continue
        gpu = slug(str(payload["gpu"]))
        head, sep, tail = path.stem.partition(f"-{gpu}")
        if not sep:
            continue
        kind = head + (f"/{tail.lstrip('-')}" if tail else "")
        folder = path.parent.relative_to(results).as_posix()
        if folder != ".":
            kind = f"{folder}/{kind}"
        found.setdefault(gpu, {})[kind] = (path, payload)
    return found


def summarise(cases: Iterable[Case]) -> tuple[str, str]:
    """The verdict over ``cases`` (those that apply and were measured) and a detail line."""
    judged = [(name, t) for name, t in cases if t.get("applies", True) and t["met"] is not None]
    if not judged:
        return "not measured", "no case measured"
    missed = [(name, t) for name, t in judged if not t["met"]]
    detail = f"met in {len(judged) - len(missed)} of {len(judged)}"
    if not missed:

        def margin(c: Case) -> float:
            return _margin(c[1])

        detail += f"; closest: {_case(*min(judged, key=margin))}"
        return "met", detail + (
            f"; best: {_case(*max(judged, key=margin))}" if len(judged) > 1 else ""
        )
    name, worst = max(missed, key=lambda c: c[1]["gap"])
    return verdict(worst), f"{detail}; furthest: {_case(name, worst)}"


def _margin(t: dict) -> float:
    """How far a met case lies past its goal, as a fraction of it (larger is better)."""
    goal, value = t["goal"], t["value"]
    if not goal:
        return 0.0
    return (value - goal if t["comparison"] == AT_LEAST else goal - value) / abs(goal)


def _case(name: str, t: dict) -> str:
    return f"{name} {_number(t['value'])} (goal {t['comparison']} {_number(t['goal'])})"


def _number(v: float) -> str:
    if not measured(v):
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def provenance(results: Path, path: Path, payload: dict) -> str:
    """``[file](file), commit, date`` of a results file, linked from the scoreboard."""
    name = path.relative_to(results).as_posix()
    return f"[{name}]({name}), {payload.get('git_commit', '?')}, {payload.get('date', '?')}"


# ---- what each results file holds for a target -------------------------------------------


def fetch_cases(key: str) -> Callable[[dict], list[Case]]:
    """``benchmarks/fetch.py``: target ``key`` of every case (a case is a table and a batch
    size; results older than a target lack it)."""
    return lambda p: [
        (f"{c['case']} x {c['batch']:,}", c["targets"][key])
        for c in p.get("cases", [])
        if key in c.get("targets", {})
    ]


def decode_cases(table_class: str) -> Callable[[dict], list[Case]]:
    """``benchmarks/decode_ab.py``: the current decoder's rate on tables of ``table_class``."""
    return lambda p: [
        (c["case"], c["decode_target"])
        for c in p.get("cases", [])
        if c.get("decode_target", {}).get("table_class") == table_class
    ]


def overlap_cases(default: bool) -> Callable[[dict], list[Case]]:
    """``benchmarks/overlap.py``: a step's slowdown beside each fetch; ``default``: only the
    loaders' settings (their grid, one kernel a fetch, blocks of the default size)."""

    def cases(p: dict) -> list[Case]:
        out = []
        for c in p.get("cases", []):
            loaders = (
                str(c.get("grid_cap", "")).startswith("default")
                and c.get("chunk_rows") is None
                and c.get("block_warps") is None
                and c.get("train_stream") == "default"
            )
            if default and not loaders:
                continue
            name = f"{c['table']} {c['fetch']}"
            if not default:
                name += f", grid {c['grid_cap']}, chunks {c.get('chunk_rows') or '-'}"
                name += f", {c.get('train_stream')} stream"
            out.append((name, check(c.get("slowdown"), TARGET_SLOWDOWN, at_least=False)))
        return out

    return cases


def pipeline_cases(p: dict) -> tuple[list[Case], list[Case]]:
    """``benchmarks/e2e.py``: epoch / max(sample + fetch, steps) of each graph and mode; the
    verdict is taken on the modes that ran as the loaders do by default (``loaders_default``;
    in results from before the modes recorded it, those with the prefetch thread, the
    loaders' default on a GPU: the others prepare each batch in the training loop's thread,
    which nothing overlaps)."""
    every = [
        (
            f"{g['name']} {m['mode']}",
            m["pipeline_check"],
            bool(m.get("loaders_default", m.get("prefetch_thread"))),
        )
        for g in p.get("graphs", [])
        for m in g.get("modes", [])
        if m.get("pipeline_check")
    ]
    return [(n, t) for n, t, thread in every if thread], [(n, t) for n, t, _ in every]


def epoch_cases(key: str) -> Callable[[dict], list[Case]]:
    """``benchmarks/e2e.py``: analysis target ``key`` (``target_check``, or
    ``speedup_target_check``) of each graph where it applies (``<key minus check>applies``)."""
    applies = key.removesuffix("check") + "applies"

    def cases(p: dict) -> list[Case]:
        out = []
        for g in p.get("graphs", []):
            a = g.get("analysis", {})
            if key in a:
                out.append((g["name"], {**a[key], "applies": bool(a.get(applies, True))}))
        return out

    return cases


def named_cases(name: str, default: Callable[[str], bool] = lambda _: True):
    """``benchmarks/sampling.py``: targets called ``name``; ``default`` picks, by their
    ``applies`` text, the configurations that the verdict is taken on."""

    def cases(p: dict) -> tuple[list[Case], list[Case]]:
        every = [(t.get("applies", ""), t) for t in p.get("targets", []) if t.get("name") == name]
        every = [(label, {**t, "applies": True}) for label, t in every]
        return [c for c in every if default(c[0])], every

    return cases


def loaders_sampler(label: str) -> bool:
    """The hop kernels as the loaders run them on a GPU by default: their grid, the seeds
    given from the host, `ibp_graph.loading.DEFAULT_SAMPLE_GROUP` batches a sampler call
    (``sample_group``), replayed from a CUDA graph (``sampler_cuda_graph``)."""
    return (
        "kernel" in label
        and "blocks/SM" not in label
        and "CUDA graph" in label
        and "seeds from the host" in label
        and f"groups of {DEFAULT_SAMPLE_GROUP}" in label
    )


def chart(name: str) -> Callable[[dict], dict]:
    """A results file's chart (its ``name`` key): met when the file names one."""

    def shown(p: dict) -> dict:
        png = p.get(name)
        if not png:
            return {"verdict": "not measured", "detail": "no chart in the results"}
        return {"verdict": "met", "detail": f"chart: {png}"}

    return shown


# (target, scope, results kind, cases): one line of the scoreboard each.
GPU_TARGETS: list[tuple[str, str, str, Callable]] = [
    ("raw zero-copy gather / pinned memcpy: >= 0.85 (512 B rows), >= 0.7 (Cora's 5,732 B)",
     "the gather kernel, ids in batch order", "fetch", fetch_cases("raw_vs_memcpy")),
    ("", "as raw tables fetch by default (ids sorted, the sort timed)", "fetch",
     fetch_cases("raw_default_vs_memcpy")),
    ("decode alone, GB/s of output: >= 400 (dense)", "current decoder, rows in GPU memory",
     "decode-ab", decode_cases("dense")),
    ("decode alone, GB/s of output: >= 1,000 (sparse)", "current decoder, rows in GPU memory",
     "decode-ab", decode_cases("sparse")),
    ("fused fetch / min(ratio x raw gather, decode alone): >= 0.9", "every SM",
     "fetch", fetch_cases("ibp_vs_ideal")),
    ("", "the loaders' side-stream grid", "fetch/grid", fetch_cases("ibp_vs_ideal")),
    ("a table that does not compress: raw gather / fused fetch <= 1.02", "every SM", "fetch",
     fetch_cases("no_compress_slowdown")),
    ("a GraphSAGE step beside a fetch on the side stream: <= 1.10x its time alone",
     "the loaders' fetch settings", "overlap", overlap_cases(True)),
    ("", "every setting timed", "overlap", overlap_cases(False)),
    ("", "CUDA event timelines and chart", "overlap", chart("plot")),
    ("prefetching loader's epoch / max(sample + fetch, train): <= 1.1", "Cora, CiteSeer",
     "e2e", pipeline_cases),
    ("", "ogbn-papers100M-sized synthetic graph", "synthetic/e2e", pipeline_cases),
    ("", "CoraSU", "corasu/e2e", pipeline_cases),
    ("GPU sampler / 1-thread CPU sampler, edges/s: >= 10", "hop kernels (loaders' default)",
     "sampling", named_cases("GPU / 1-thread CPU edges/s", loaders_sampler)),
    ("GPU sampler over UVA / graph in GPU memory: >= 0.5", "hop kernels (loaders' default)",
     "sampling", named_cases("UVA / device graph edges/s", loaders_sampler)),
    ("host time / GPU time per sampled batch: <= 0.2", "hop kernels (loaders' default)",
     "sampling", named_cases("host CPU / GPU busy time per batch", loaders_sampler)),
    ("epochs at 90% of IBP's ideal gain over raw UVA", "ogbn-papers100M-sized synthetic graph",
     "synthetic/e2e", epoch_cases("target_check")),
    ("", "CoraSU", "corasu/e2e", epoch_cases("target_check")),
    ("CoraSU epochs >= 1.74x faster than raw UVA", "CoraSU (ogbn-products-sized)",
     "corasu/e2e", epoch_cases("speedup_target_check")),
    ("epoch breakdown chart", "ogbn-papers100M-sized synthetic graph", "synthetic/e2e",
     chart("plot")),
    ("", "CoraSU", "corasu/e2e", chart("plot")),
]  # fmt: skip

CPU_TARGETS: list[tuple[str, str, str, Callable]] = [
    ("CPU sampler / DGL 2.1.0's, edges/s: >= 1 at 1 and 2 threads", "side by side, one process",
     "sampling-cpu.json", named_cases("ibp-graph once / DGL edges/s")),
]  # fmt: skip


#: The stage of ``benchmarks/gpu_session.sh`` that writes each results kind a target reads.
SESSION_STAGES = {
    "fetch": "fetch", "fetch/grid": "grid", "decode-ab": "decodeab", "overlap": "overlap",
    "e2e": "e2e", "synthetic/e2e": "synthetic", "corasu/e2e": "corasu", "sampling": "sampling",
}  # fmt: skip


def freshness(kinds: dict[str, tuple[Path, dict]], results: Path) -> list[dict]:
    """The results the GPU targets read, those absent first, then the oldest first: each
    kind's file, commit and date, and the `gpu_session.sh` stage that writes it anew."""
    out = []
    for kind in dict.fromkeys(k for _, _, k, _ in GPU_TARGETS):
        entry = {"kind": kind, "stage": SESSION_STAGES[kind], "file": None, "commit": None,
                 "date": None}  # fmt: skip
        if kind in kinds:
            path, payload = kinds[kind]
            entry |= {"file": path.relative_to(results).as_posix(),
                      "commit": payload.get("git_commit"), "date": payload.get("date")}  # fmt: skip
        out.append(entry)
    return sorted(out, key=lambda e: (e["file"] is not None, str(e["date"] or "")))


def line(target: str, scope: str, found: tuple[Path, dict] | None, cases: Callable,
         results: Path) -> dict:  # fmt: skip
    """One scoreboard line: the verdict of ``cases`` on the results ``found`` (None: absent)."""
    if found is None:
        return {"target": target, "scope": scope, "verdict": "not measured",
                "detail": "no results file", "source": ""}  # fmt: skip
    path, payload = found
    picked = cases(payload)
    source = provenance(results, path, payload)
    if isinstance(picked, dict):  # a verdict of its own (a chart)
        return {"target": target, "scope": scope, **picked, "source": source}
    if isinstance(picked, tuple):  # (the configurations judged, every one timed)
        picked, every = picked
    else:
        every = picked
    judged, detail = summarise(picked)
    if not picked and every:
        detail = "none in the loaders' default configuration"
    if len(every) != len(picked):
        detail += f" (every configuration: {summarise(every)[1]})"
    return {"target": target, "scope": scope, "verdict": judged, "detail": detail,
            "source": source}  # fmt: skip


def _carried(targets: list[tuple[str, str, str, Callable]]) -> list[tuple[str, str, str, Callable]]:
    """The target lines with an empty target text given the line's above (same target)."""
    out, last = [], ""
    for target, *rest in targets:
        last = target or last
        out.append((last, *rest))
    return out


def scoreboard(results: Path = RESULTS) -> dict:
    """Every target's line, for each GPU with results and for the CPU."""
    gpus = gpu_results(results)
    board: dict = {"gpus": {}, "cpu": []}
    for gpu, kinds in sorted(gpus.items()):
        any_payload = next(iter(kinds.values()))[1]
        about = f"{any_payload['gpu']}, PCIe {any_payload.get('pcie', '?')}"
        rows = [line(t, s, kinds.get(k), f, results) for t, s, k, f in _carried(GPU_TARGETS)]
        board["gpus"][gpu] = {"device": about, "rows": rows, "results": freshness(kinds, results)}
    for t, s, name, f in CPU_TARGETS:
        path = results / name
        payload = load(path)
        board["cpu"].append(line(t, s, None if payload is None else (path, payload), f, results))
    return board


def _fresh_row(e: dict) -> str:
    file = e["file"] or f"{e['kind']}: none"
    return f"| {file} | {e['commit'] or '-'} | {e['date'] or '-'} | `{e['stage']}` |"


def markdown(board: dict) -> str:
    """The scoreboard as a page."""
    out = [
        "# Performance targets: the verdicts of the committed results",
        "",
        "Written by `python benchmarks/scoreboard.py` from the results files beside this page "
        "(each line names its own, with its commit and date); nothing here is measured by it. "
        "A verdict over several cases is met only when every case it applies to is; the "
        "detail says how many were, and the case furthest from its goal (or closest to it).",
        "",
    ]
    head = [
        "| target | scope | verdict | detail | results (commit, date) |",
        "|---|---|---|---|---|",
    ]
    sections = [(f"## {g['device']}", g["rows"], g["results"]) for g in board["gpus"].values()]
    sections.append(("## CPU", board["cpu"], []))
    if not board["gpus"]:
        out += ["No GPU results are present: every GPU target is not measured.", ""]
    for title, rows, fresh in sections:
        out += [title, "", *head]
        last = None
        for r in rows:
            target, last = ("" if r["target"] == last else r["target"]), r["target"]
            v = r["verdict"] if r["verdict"] in ("met", "not measured") else f"**{r['verdict']}**"
            out.append(f"| {target} | {r['scope']} | {v} | {r['detail']} | {r['source']} |")
        out.append("")
        if fresh:
            out += [
                "The results behind these lines, absent or oldest first, and the stage of "
                "`benchmarks/gpu_session.sh` that measures each anew:",
                "",
                "| results | commit | date | stage |",
                "|---|---|---|---|",
                *(_fresh_row(e) for e in fresh),
                "",
            ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="the results folder read "
                    "(default: benchmarks/results/, the committed results)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=None, help="where targets.md/json go "
                    "(default: the --results folder)")  # fmt: skip
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        ap.error(f"--results {args.results}: not a folder")
    out = args.out or args.results
    board = scoreboard(args.results)
    write_json_md("targets", finite(board), lambda: markdown(board), out)
    counts = [r["verdict"].split()[0] for g in board["gpus"].values() for r in g["rows"]]
    print(
        f"{out / 'targets.md'}: {len(board['gpus'])} GPU(s); "
        f"{counts.count('met')} met, {counts.count('gap')} missed, "
        f"{counts.count('not')} not measured"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
