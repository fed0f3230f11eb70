"""benchmarks/profile_fetch.py on the CPU: the plan, the launches and the summary of ncu's CSV.

The driver's GPU run is exercised with the stand-ins of tests/test_fetch_benchmark.py (CuPy's
``cuda`` module faked, the two kernel launchers replaced by NumPy versions) and the profiler
window recorded, so the order of warm-ups, windows and checks is tested without a GPU. The
summariser reads a small CSV written in ncu's ``--csv --page details`` layout.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_fetch_benchmark import FakeCuda, numpy_fetch_decode, numpy_raw_gather

from benchmarks import fetch, profile_fetch
from ibp_graph import cuda_table
from ibp_graph.kernels import fetch_decode as fused
from ibp_graph.kernels import raw_gather as gather
from ibp_graph.kernels.runtime import read_source

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_session.sh"
SMALL = ["--table-gb", "0.002", "--batch", "500", "--block-rows", "64"]


def dry(tmp_path: Path, *argv: str) -> dict:
    """A dry run with small tables; the manifest it wrote."""
    manifest = tmp_path / "manifest.json"
    profile_fetch.main([*SMALL, "--dry-run", "--manifest", str(manifest), *argv])
    return json.loads(manifest.read_text())


# --------------------------------------------------------------------------------------------
# Arguments and the plan
# --------------------------------------------------------------------------------------------


def test_defaults() -> None:
    args = profile_fetch.parse_args([])
    assert args.cases == list(profile_fetch.CASES) and len(args.cases) == 4
    assert args.table_gb == 1.0 and args.table_bytes == 2**30 and args.batch == 100_000
    assert args.block_rows == fetch.BLOCK_ROWS and not args.dry_run and args.summarise is None
    assert profile_fetch.WHATS == ("raw", "ibp", "ibp_db", "decode", "decode_db")


def test_dry_run_writes_the_planned_launches_in_order(tmp_path: Path, capsys) -> None:
    doc = dry(tmp_path)
    names = list(profile_fetch.CASES)
    assert doc["dry_run"] and doc["complete"] and doc["gpu_device"] is None
    assert "cudaProfilerStart" in doc["window"]
    assert [c["case"] for c in doc["cases"]] == names
    launches = doc["launches"]
    assert len(launches) == 5 * len(names) <= 20  # ncu replays each: few launches
    assert [(x["case"], x["what"]) for x in launches] == [
        (n, w) for n in names for w in profile_fetch.WHATS
    ]
    assert [x["index"] for x in launches] == list(range(len(launches)))
    assert {x["status"] for x in launches} == {"planned"}
    assert all(x["bit_identical"] is None for x in launches)
    cases = {c["case"]: c for c in doc["cases"]}
    for x in launches:
        case = cases[x["case"]]
        assert x["rows"] == case["batch"] and x["row_bytes"] == case["row_bytes"]
        if x["what"] == "raw":
            assert x["kernel"].startswith("ibp_raw_gather_") and x["source"] == "pinned"
            assert x["stored_bytes"] == x["rows"] * x["row_bytes"]
        else:
            db = "db_" if x["what"].endswith("_db") else ""
            assert re.fullmatch(rf"ibp_fetch_decode_{db}w[48]_o[48]", x["kernel"])
            assert x["double_buffer"] == bool(db)
            assert x["stored_bytes"] == case["batch_stored_bytes"] < x["rows"] * x["row_bytes"]
            assert x["source"] == ("gpu" if x["what"].startswith("decode") else "pinned")
    bow = cases["bag-of-words-5732B"]
    assert bow["row_bytes"] == 5732 and bow["ratio"] > 10  # 1.3% ones compress well
    assert launches[15]["kernel"] == "ibp_raw_gather_v4"  # 5,732 = 4 mod 16: vectors of 4
    assert launches[0]["kernel"] == "ibp_raw_gather_v16"
    out = capsys.readouterr().out
    assert "20 launches planned over 4 cases" in out and "needs a CUDA GPU" in out


def test_tables_are_tiled_past_the_l2_and_raw_ids_folded_onto_the_raw_buffer(tmp_path) -> None:
    doc = dry(tmp_path, "--cases", "bag-of-words-5732B,dense-normal-512B")
    table_bytes = profile_fetch.parse_args(SMALL).table_bytes
    bow, dense = doc["cases"]
    for case in (bow, dense):
        assert case["l2_bytes"] == fetch.CPU_L2_BYTES
        assert case["stored_gb"] * 1e9 >= fetch.L2_POOL_FACTOR * fetch.CPU_L2_BYTES
        assert case["raw_rows"] == table_bytes // case["row_bytes"]
        assert case["table_rows"] == case["times"] * case["block_rows"]
    # The sparse table's stored rows decide its size: far more rows than its raw bytes make.
    assert bow["times"] > fetch.tiles(table_bytes, bow["block_rows"], bow["row_bytes"])
    assert bow["table_rows"] > bow["raw_rows"] and bow["raw_ids_folded"]
    assert dense["times"] == fetch.tiles(table_bytes, dense["block_rows"], dense["row_bytes"])
    assert not dense["raw_ids_folded"]


def test_the_same_seed_draws_the_same_batch(tmp_path: Path) -> None:
    first = dry(tmp_path, "--cases", "sparse-5pct-512B")
    again = dry(tmp_path, "--cases", "sparse-5pct-512B")
    assert first["cases"][0]["batch_stored_bytes"] == again["cases"][0]["batch_stored_bytes"]


def test_cases_are_selectable_and_keep_their_order(tmp_path: Path) -> None:
    doc = dry(tmp_path, "--cases", "bag-of-words-5732B,sparse-5pct-512B")
    assert [c["case"] for c in doc["cases"]] == ["bag-of-words-5732B", "sparse-5pct-512B"]
    assert [x["case"] for x in doc["launches"]] == ["bag-of-words-5732B"] * 5 + [
        "sparse-5pct-512B"
    ] * 5
    assert doc["settings"]["cases"] == ["bag-of-words-5732B", "sparse-5pct-512B"]


def test_bag_of_words_rows() -> None:
    import numpy as np

    rows = profile_fetch.bag_of_words(400, np.random.default_rng(0))
    assert rows.shape == (400, 1433) and rows.dtype == np.float32
    assert set(np.unique(rows)) <= {0.0, 1.0}
    assert 0.008 < rows.mean() < 0.018


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cases", "dense-normal-512B,zipf-512B"], "unknown case 'zipf-512B'"),
        (["--cases", ","], "no case given"),
        (["--batch", "0"], "--batch must be >= 1"),
        (["--table-gb", "0"], "--table-gb must be positive"),
    ],
)
def test_bad_arguments_give_one_line(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        profile_fetch.parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("profile_fetch.py: error")


def test_bad_case_from_the_command_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/profile_fetch.py", "--dry-run", "--cases", "cora"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and "unknown case 'cora'" in done.stderr


def test_main_without_a_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        profile_fetch.main(["--cases", "sparse-5pct-512B"])


# --------------------------------------------------------------------------------------------
# The launches, with stand-ins for the GPU
# --------------------------------------------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[str, bool]]:
    """NumPy kernels; records each launch (kernel kind, inside a profiler window or not)."""
    events: list[tuple[str, bool]] = []
    window = {"open": False}

    def record(kind, fn):
        def launch(*args, **kw):
            events.append((kind + ("_db" if kw.get("double_buffer") else ""), window["open"]))
            return fn(*args, **kw)

        return launch

    raw, dec = record("raw", numpy_raw_gather), record("fused", numpy_fetch_decode)
    monkeypatch.setattr(gather, "raw_gather", raw)
    monkeypatch.setattr(fused, "fetch_decode", dec)
    monkeypatch.setattr(cuda_table, "raw_gather", raw)
    monkeypatch.setattr(cuda_table, "fetch_decode", dec)

    @contextlib.contextmanager
    def fake_window(device):
        assert not window["open"], "profiler windows nest"
        window["open"] = True
        events.append(("start", True))
        try:
            yield
        finally:
            window["open"] = False
            events.append(("stop", False))

    monkeypatch.setattr(profile_fetch, "profiler_window", fake_window)
    return events


def run_with_stand_ins(tmp_path: Path, *argv: str) -> dict:
    """`profile_cases` on the CPU with the stand-ins; the manifest written."""
    args = profile_fetch.parse_args([*SMALL, "--manifest", str(tmp_path / "m.json"), *argv])
    cases = profile_fetch.build_cases(args.cases, 1, args.seed)
    cuda = FakeCuda()
    bench = fetch.Bench(profile_fetch.bench_args(args, cases), torch.device("cpu"), cuda)
    manifest = profile_fetch.new_manifest(args, "Fake GPU")
    try:
        profile_fetch.profile_cases(bench, args, manifest)
    finally:
        bench.close()
    assert cuda.runtime.registered == {}  # every pinned buffer was released
    return json.loads((tmp_path / "m.json").read_text())


def test_each_launch_is_profiled_alone_after_the_warm_ups(recorded, tmp_path: Path) -> None:
    doc = run_with_stand_ins(tmp_path, "--cases", "sparse-5pct-512B,bag-of-words-5732B")
    assert doc["complete"] and not doc["dry_run"] and doc["gpu_device"] == "Fake GPU"
    launches = doc["launches"]
    assert [x["status"] for x in launches] == ["profiled"] * 10
    assert all(x["bit_identical"] and x["errors"] == [0, 0] for x in launches)
    kinds = ["raw", "fused", "fused_db", "fused", "fused_db"]
    per_case = [(k, False) for k in kinds]  # the warm-ups, outside any window
    for k in kinds:  # then each launch alone in its window
        per_case += [("start", True), (k, True), ("stop", False)]
    assert recorded == per_case * 2


def test_a_wrong_output_is_recorded(recorded, monkeypatch, tmp_path: Path) -> None:
    def wrong_when_staged(codec, idx, out, error, *, double_buffer=False, **kw):
        numpy_fetch_decode(codec, idx, out, error, **kw)
        if double_buffer:
            out.view(torch.uint8).reshape(-1)[0] ^= 1

    monkeypatch.setattr(cuda_table, "fetch_decode", wrong_when_staged)
    doc = run_with_stand_ins(tmp_path, "--cases", "dense-normal-512B")
    same = {x["what"]: x["bit_identical"] for x in doc["launches"]}
    assert same == {"raw": True, "ibp": True, "ibp_db": False, "decode": True, "decode_db": False}


def test_rows_too_wide_to_double_buffer_are_skipped(recorded, monkeypatch, tmp_path) -> None:
    def one_buffer_only(codec, idx, out, error, *, double_buffer=False, **kw):
        if double_buffer:
            raise ValueError("double-buffered rows need ...; use the raw gather or one buffer")
        numpy_fetch_decode(codec, idx, out, error, **kw)

    monkeypatch.setattr(cuda_table, "fetch_decode", one_buffer_only)
    doc = run_with_stand_ins(tmp_path, "--cases", "sparse-5pct-512B")
    status = {x["what"]: x["status"] for x in doc["launches"]}
    assert status == {
        "raw": "profiled",
        "ibp": "profiled",
        "ibp_db": "skipped",
        "decode": "profiled",
        "decode_db": "skipped",
    }
    assert "one buffer" in doc["launches"][2]["note"]
    assert [kind for kind, _ in recorded].count("start") == 3  # 3 windows, 3 launches


# --------------------------------------------------------------------------------------------
# The summary of ncu's CSV
# --------------------------------------------------------------------------------------------

HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    '"Metric Value"'
)


def ncu_row(rid: int, kernel: str, section: str, name: str, unit: str, value: str) -> str:
    """One line of ncu's ``--csv --page details`` output."""
    cells = [str(rid), "4242", "python3", "127.0.0.1", kernel, "1", "7", "(256, 1, 1)"]
    cells += ["(132, 1, 1)", "0", "9.0", section, name, unit, value]
    return ",".join(f'"{c}"' for c in cells)


SOL, CLI = "GPU Speed Of Light Throughput", "Command line profiler metrics"
STALL = "smsp__warp_issue_stalled_{}_per_warp_active.pct"


def fixture_csv(path: Path, kernels: list[str]) -> Path:
    """Result 0 with every metric the summary reads, result 1 with a few, the rest bare."""
    raw = kernels[0]
    lines = [
        "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
        HEADER,
        ncu_row(0, raw, SOL, "Duration", "nsecond", "10,000"),
        ncu_row(0, raw, SOL, "Memory Throughput", "%", "40.50"),
        ncu_row(0, raw, SOL, "DRAM Throughput", "%", "2.50"),
        ncu_row(0, raw, SOL, "Compute (SM) Throughput", "%", "12.00"),
        ncu_row(0, raw, "Memory Workload Analysis", "Memory Throughput", "byte/second", "1e10"),
        ncu_row(0, raw, "Memory Workload Analysis", "L2 Hit Rate", "%", "33.3"),
        ncu_row(0, raw, "Memory Workload Analysis", "L1/TEX Hit Rate", "%", "95.30"),
        ncu_row(0, raw, CLI, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "", "2,000"),
        ncu_row(0, raw, CLI, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "9,000"),
        ncu_row(0, raw, "Occupancy", "Achieved Occupancy", "%", "11.90"),
        ncu_row(0, raw, "Launch Statistics", "Registers Per Thread", "register/thread", "32"),
        ncu_row(0, raw, "Instruction Statistics", "Executed Instructions", "inst", "60,000"),
        ncu_row(0, raw, CLI, "pcie__read_bytes.sum.per_second", "Gbyte/second", "25.60"),
        ncu_row(0, raw, CLI, "pcie__read_bytes.avg.pct_of_peak_sustained_elapsed", "%", "80"),
        ncu_row(0, raw, CLI, STALL.format("long_scoreboard"), "%", "70.10"),
        ncu_row(0, raw, CLI, STALL.format("selected"), "%", "90"),  # no stall
        ncu_row(0, raw, CLI, STALL.format("lg_throttle"), "%", "12.00"),
        ncu_row(0, raw, CLI, STALL.format("wait"), "%", "3.50"),
        ncu_row(0, raw, CLI, STALL.format("barrier"), "%", "0.50"),
        ncu_row(1, kernels[1], SOL, "Duration", "usecond", "20.48"),
        ncu_row(1, kernels[1], "Occupancy", "Achieved Occupancy", "%", "n/a"),
        ncu_row(1, kernels[1], "Warp State Statistics", "Stall Long Scoreboard", "cycle", "30.5"),
        ncu_row(1, kernels[1], "Warp State Statistics", "Stall Wait", "cycle", "2.5"),
    ]
    lines += [
        ncu_row(i, k, "Launch Statistics", "Block Size", "", "256")
        for i, k in enumerate(kernels[2:], 2)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def table_rows(md: str) -> list[dict[str, str]]:
    """The summary's table as dicts keyed by column title."""
    titles = [t.strip() for t in profile_fetch.SUMMARY_COLUMNS.split("|")]
    body = [line for line in md.splitlines() if re.match(r"^\| \d+ \|", line)]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in body]
    return [dict(zip(titles, row, strict=True)) for row in cells]


def test_summary_of_a_details_csv(tmp_path: Path, capsys) -> None:
    doc = dry(tmp_path, "--cases", "sparse-5pct-512B")
    kernels = [x["kernel"] for x in doc["launches"]]
    csv_path = fixture_csv(tmp_path / "ncu-fetch.csv", kernels)
    profile_fetch.main(["--summarise", str(csv_path), str(tmp_path / "manifest.json")])
    md = (tmp_path / "profile.md").read_text()  # beside the CSV by default
    assert capsys.readouterr().out.endswith(md)  # printed too
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert f"- command: `{manifest['command']}`, under ncu" in md  # the run that profiled
    rows = table_rows(md)
    assert [r["what"] for r in rows] == list(profile_fetch.WHATS)
    assert [r["kernel"] for r in rows] == kernels
    first = rows[0]
    assert first["case"] == "sparse-5pct-512B" and first["rows"] == "500"
    assert first["duration µs"] == "10.0"
    assert first["delivered GB/s"] == "25.6"  # 500 rows x 512 B / 10 us
    assert first["stored GB/s"] == "25.6"  # the raw gather reads what it delivers
    assert (first["memory %"], first["DRAM %"], first["compute %"]) == ("40.5", "2.5", "12.0")
    assert (first["PCIe read GB/s"], first["PCIe read %"]) == ("25.6", "80.0")
    assert first["busiest"] == "PCIe 80%" and first["L2 hit %"] == "33.3"
    assert first["achieved occupancy %"] == "11.9" and first["registers"] == "32"
    assert first["top stalls (% of active warp cycles)"] == (
        "long_scoreboard 70.1%, lg_throttle 12.0%, wait 3.5%"
    )
    assert first["warp inst / row"] == "120.0"  # 60,000 / 500
    assert first["L1 hit %"] == "95.3"
    assert (first["global loads / row"], first["load sectors / row"]) == ("4.0", "18.0")
    second = rows[1]
    assert second["duration µs"] == "20.5"
    stored = doc["launches"][1]["stored_bytes"]
    assert second["stored GB/s"] == f"{stored / 20.48e-6 / 1e9:,.1f}"
    for col in ("memory %", "DRAM %", "PCIe read GB/s", "achieved occupancy %", "registers",
                "L1 hit %", "global loads / row", "load sectors / row"):  # fmt: skip
        assert second[col] == "n/a", col
    assert (
        second["top stalls (% of active warp cycles)"]
        == "Long Scoreboard 30.5 cycle, Wait 2.5 cycle"
    )
    for r in rows[2:]:
        assert r["duration µs"] == r["busiest"] == r["warp inst / row"] == "n/a"
        assert r["top stalls (% of active warp cycles)"] == "n/a"
    assert "dry run's plan" in md and "ncu has" not in md and "ncu profiled" not in md


def test_summary_notes_missing_results_and_other_kernels(tmp_path: Path) -> None:
    doc = dry(tmp_path, "--cases", "sparse-5pct-512B")
    kernels = [x["kernel"] for x in doc["launches"]]
    wrong = ["ibp_raw_gather_v4", *kernels[1:3]]  # 3 results, the first of another kernel
    csv_path = fixture_csv(tmp_path / "ncu.csv", wrong)
    out = tmp_path / "p" / "summary.md"
    rows = profile_fetch.summarise(csv_path, tmp_path / "manifest.json", out)
    md = out.read_text()
    assert len(rows) == 5 and len(table_rows(md)) == 5
    assert "ncu has 3 results and the manifest 5 profiled launches" in md
    assert f"ncu profiled ibp_raw_gather_v4, the manifest launched {kernels[0]}" in md


def test_summary_of_a_csv_without_results(tmp_path: Path) -> None:
    dry(tmp_path, "--cases", "sparse-5pct-512B")
    empty = tmp_path / "empty.csv"
    empty.write_text("==WARNING== No kernels were profiled.\n")
    rows = profile_fetch.summarise(empty, tmp_path / "manifest.json", tmp_path / "p.md")
    assert len(rows) == 5 and all(r["duration_us"] is None for r in rows)
    assert "ncu has 0 results" in (tmp_path / "p.md").read_text()


def test_number_and_units() -> None:
    assert profile_fetch.number("1,234.5") == 1234.5
    assert profile_fetch.number("n/a") is None and profile_fetch.number("") is None
    assert profile_fetch.rate_gbps((2.0, "Tbyte/second")) == 2000.0
    assert profile_fetch.rate_gbps((3e9, "byte/s")) == 3.0
    assert profile_fetch.rate_gbps((3.0, "%")) is None and profile_fetch.rate_gbps(None) is None
    assert profile_fetch.base_name("ibp_fetch_decode_w4_o4(unsigned long, ...)") == (
        "ibp_fetch_decode_w4_o4"
    )


# --------------------------------------------------------------------------------------------
# The profile stage's ncu command
# --------------------------------------------------------------------------------------------


def test_the_stage_profiles_the_fetch_kernels_with_the_clocks_left_alone() -> None:
    text = SCRIPT.read_text()
    assert "--clock-control none" in text and "--profile-from-start off" in text
    assert "--target-processes all" in text
    m = re.search(r'--kernel-name "regex:([^"]+)"', text)
    assert m and m.group(1) == "ibp_(fetch_decode|raw_gather)"
    for section in (
        "SpeedOfLight",
        "MemoryWorkloadAnalysis",
        "WarpStateStats",
        "SchedulerStats",
        "Occupancy",
        "LaunchStats",
        "InstructionStats",
    ):
        assert f"--section {section}" in text, section
    assert "--csv --page details" in text and "--print-units base" in text
    assert "pcie__read_bytes.sum.per_second" in text and "_per_warp_active.pct" in text
    # Every entry point of the two kernel sources matches the filter; nothing else does.
    entries = set()
    for source in ("fetch_decode.cu", "raw_gather.cu"):
        src = (REPO / "cuda" / source).read_text()
        entries |= set(re.findall(r"^IBP_\w+\((ibp_\w+)", src, re.M))
    entries.add("ibp_raw_gather_lines")
    assert len(entries) >= 14
    assert all(re.search(m.group(1), e) for e in entries)
    assert not re.search(m.group(1), "ibp_sample_hop") and not re.search(m.group(1), "elementwise")


def test_the_stage_runs_the_driver_then_the_summary() -> None:
    block = re.search(r"^    profile\)\n(.*?)^        ;;", SCRIPT.read_text(), re.M | re.S)
    assert block
    body = block.group(1)
    assert (
        body.index("profile_fetch.py --manifest")
        < body.index("ncu_csv")
        < body.index("--summarise")
    )
    assert '--export "$OUT/ncu-fetch"' in body and "profile.md" in body


def test_summary_of_a_raw_page_csv_says_which_page_it_needs(tmp_path: Path) -> None:
    doc = dry(tmp_path, "--cases", "sparse-5pct-512B")
    raw_page = tmp_path / "raw.csv"  # one row per kernel, metrics as columns, units second
    lines = ['"ID","Kernel Name","gpu__time_duration.sum"', '"","","nsecond"']
    lines += [f'"{i}","{x["kernel"]}","1,000"' for i, x in enumerate(doc["launches"])]
    raw_page.write_text("\n".join(lines) + "\n")
    rows = profile_fetch.summarise(raw_page, tmp_path / "manifest.json", tmp_path / "p.md")
    assert len(rows) == 5 and all(r["duration_us"] is None for r in rows)
    assert "not `--page raw`" in (tmp_path / "p.md").read_text()


def source_page(kernels: list[str], lines_of: dict[int, list[tuple[str, str, str, str]]]) -> str:
    """ncu's ``--page source --csv --print-source cuda`` as this module reads it: per result a
    ``"Kernel Name",NAME`` row, a header, then one row per line (``#``, source, metrics)."""
    out = ["==PROF== a message first"]
    header = ["#", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
    for i, kernel in enumerate(kernels):
        out.append(f'"Kernel Name","{kernel}"')
        out.append(",".join(f'"{h}"' for h in header))
        for line, text, samples, inst in lines_of.get(i, []):
            out.append(",".join(f'"{c}"' for c in (line, text, samples, inst)))
    return "\n".join(out) + "\n"


def test_summary_says_where_the_decoders_instructions_go(tmp_path: Path) -> None:
    doc = dry(tmp_path, "--cases", "sparse-5pct-512B")
    kernels = [x["kernel"] for x in doc["launches"]]
    csv_path = fixture_csv(tmp_path / "ncu-fetch.csv", kernels)
    decode = [x["what"] for x in doc["launches"]].index("decode")
    source = read_source("fetch_decode.cu").splitlines()
    page = {
        decode: [
            ("500", "", "10", "1,500"),  # no text in the page: the file's line 500
            ("501", "x = a | b;", "30", "500"),
            ("", "an unnumbered line", "0", "0"),
            ("12", "one more", "60", "3,000"),
        ],
        0: [("7", "the raw gather", "1", "999,999")],  # not a decode launch: not listed
    }
    (tmp_path / "ncu-source.csv").write_text(source_page(kernels, page))
    profile_fetch.main(["--summarise", str(csv_path), str(tmp_path / "manifest.json")])
    md = (tmp_path / "profile.md").read_text()
    assert "## Where the decoder's instructions go (`ncu-source.csv`)" in md
    assert f"### sparse-5pct-512B: {kernels[decode]}" in md
    rows = doc["launches"][decode]["rows"]
    assert f"5,000 warp instructions executed in all, {5000 / rows:,.1f} a row." in md
    body = md.split(f"### sparse-5pct-512B: {kernels[decode]}")[1].splitlines()
    listed = [line for line in body if line.startswith("| ") and "---" not in line][1:]
    text_500 = " ".join(source[499].split()).replace("|", "\\|")
    assert listed == [
        "| 12 | 60.0 | 60.0 | `one more` |",
        f"| 500 | 30.0 | 10.0 | `{text_500}` |",
        "| 501 | 10.0 | 30.0 | `x = a \\| b;` |",
        "| ? | 0.0 | 0.0 | `an unnumbered line` |",
    ]
    assert "the raw gather" not in md
    # Tables, but no line of a decode launch among them; a page without tables says so; a
    # summary without a page has no such section.
    (tmp_path / "ncu-source.csv").write_text(source_page(kernels, {0: page[0]}))
    profile_fetch.main(["--summarise", str(csv_path), str(tmp_path / "manifest.json")])
    md = (tmp_path / "profile.md").read_text()
    assert f"- ncu-source.csv: no `decode` launch among its {len(kernels)} tables." in md
    (tmp_path / "ncu-source.csv").write_text("==ERROR== something else\n")
    profile_fetch.main(["--summarise", str(csv_path), str(tmp_path / "manifest.json")])
    md = (tmp_path / "profile.md").read_text()
    assert "- ncu-source.csv holds no per-line table (see profile.log)." in md
    (tmp_path / "ncu-source.csv").unlink()
    profile_fetch.main(["--summarise", str(csv_path), str(tmp_path / "manifest.json")])
    assert "Where the decoder's instructions go" not in (tmp_path / "profile.md").read_text()
