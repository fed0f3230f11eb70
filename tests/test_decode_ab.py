"""benchmarks/decode_ab.py and `runtime.kernel_sources` on the CPU.

The sources' entry points are compared through NVRTC (the dev extra) as on the GPU machine;
the GPU run is exercised end to end with the fused launcher replaced by the NumPy stand-in of
tests/test_fetch_benchmark.py, which also records whether it was called inside
`kernel_sources` (the baseline) or not (the current kernel).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from test_fetch_benchmark import numpy_fetch_decode

import ibp_graph
from benchmarks import decode_ab, fetch
from ibp_graph import cuda_table
from ibp_graph.kernels import runtime

SMALL = [
    "--table-gb", "0.001", "--batch", "300", "--block-rows", "64", "--widths", "256",
    "--no-real", "--rounds", "3", "--repeats", "1",
]  # fmt: skip

CURRENT = runtime.read_source(decode_ab.SOURCE)


def _baseline(
    tmp_path: Path, text: str = CURRENT, commit: str | None = "abc1234", name: str = "baseline"
) -> Path:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / decode_ab.SOURCE).write_text(text)
    if commit:
        (folder / "COMMIT").write_text(commit + "\n")
    return folder


# --------------------------------------------------------------------------------------------
# kernel_sources
# --------------------------------------------------------------------------------------------


def test_kernel_sources_build_launches_inside_from_the_folder(monkeypatch, tmp_path) -> None:
    asked: list[str] = []
    monkeypatch.setattr(runtime, "_kernel", lambda source, entry, device: asked.append(source))
    folder = _baseline(tmp_path)
    runtime.kernel(decode_ab.SOURCE, "e", 0)
    with runtime.kernel_sources(folder) as path:
        assert path == folder.resolve()
        runtime.kernel(decode_ab.SOURCE, "e", 0)
        seen_by_thread: list[str] = []
        thread = threading.Thread(target=lambda: seen_by_thread.append(str(runtime._SOURCES.get())))
        thread.start()
        thread.join()
        assert seen_by_thread == ["None"]  # another thread builds the package's kernels
    runtime.kernel(decode_ab.SOURCE, "e", 0)
    assert asked == [
        decode_ab.SOURCE,
        str(folder.resolve() / decode_ab.SOURCE),
        decode_ab.SOURCE,
    ]


def test_read_source_reads_an_absolute_path_and_names_a_missing_one(tmp_path) -> None:
    folder = _baseline(tmp_path, "// another version\n")
    assert runtime.read_source(str(folder / decode_ab.SOURCE)) == "// another version\n"
    assert runtime.read_source(decode_ab.SOURCE) == CURRENT
    with pytest.raises(FileNotFoundError, match="missing.cu is missing"):
        runtime.read_source(str(folder / "missing.cu"))


def test_kernel_sources_refuse_a_folder_without_sources(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no CUDA sources \(\*\.cu\) in .*empty"):
        with runtime.kernel_sources(tmp_path / "empty"):
            pass
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no CUDA sources"):
        with runtime.kernel_sources(tmp_path / "empty"):
            pass
    assert runtime._SOURCES.get() is None


# --------------------------------------------------------------------------------------------
# The sources compared
# --------------------------------------------------------------------------------------------


def test_entry_points_are_the_fused_kernels_with_their_parameters(nvrtc) -> None:
    entries = decode_ab.entry_points(CURRENT, "fetch_decode.cu")
    names = {
        f"ibp_fetch_decode{db}_w{w}_o{o}" for db in ("", "_db") for w in (4, 8) for o in (4, 8)
    }
    assert set(entries) == names
    params = entries["ibp_fetch_decode_w4_o4"]
    assert len(params) == 21  # rows ... buf_words, runs, as the launcher passes them
    assert params[0].startswith(".param .u64") and params[-1].startswith(".param .u64")
    assert params[-2] == ".param .u32"  # buf_words
    assert entries["ibp_fetch_decode_w4_o4"] == entries["ibp_fetch_decode_db_w4_o4"]


def test_a_baseline_with_the_same_entry_points_is_accepted(tmp_path, nvrtc) -> None:
    same = decode_ab.check_sources(_baseline(tmp_path))
    assert same["same_text"] and len(same["entry_points"]) == 8
    edited = CURRENT + "// an edit that changes no entry point\n"
    other = decode_ab.check_sources(_baseline(tmp_path, edited))
    assert not other["same_text"]


def test_a_baseline_taking_the_first_parameters_is_accepted(tmp_path, nvrtc) -> None:
    """A decoder from before the runs table: all but the last parameter, the launcher's last
    argument then not read."""
    last = ",          \\\n        const W* __restrict__ runs) {"
    assert CURRENT.count(last) == 1  # the entry points' macro
    before = CURRENT.replace(last, ") {").replace(
        "cluster_ids, runs, code_bits", "cluster_ids, masks, code_bits"
    )
    assert "__restrict__ runs) {" not in before
    fewer = decode_ab.check_sources(_baseline(tmp_path, before))
    assert not fewer["same_text"] and len(fewer["entry_points"]) == 8
    params = decode_ab.entry_points(before, "before.cu")["ibp_fetch_decode_w4_o4"]
    assert len(params) == 20


def test_a_baseline_the_launcher_cannot_launch_is_refused(tmp_path, nvrtc) -> None:
    macro = "const W* __restrict__ runs) {"
    one_more = CURRENT.replace(macro, macro.replace("runs)", "runs, int extra)"))
    assert one_more.count("int extra") == 1  # the entry points' macro
    with pytest.raises(SystemExit, match=r"ibp_fetch_decode_\w+ takes other parameters .*\(22\)"):
        decode_ab.check_sources(_baseline(tmp_path, one_more))
    fewer = CURRENT.replace("IBP_FETCH_DECODE(ibp_fetch_decode_db_w8_o8, u64, u64, 2)", "")
    with pytest.raises(SystemExit, match="missing: ibp_fetch_decode_db_w8_o8; extra: none"):
        decode_ab.check_sources(_baseline(tmp_path, fewer))
    with pytest.raises(SystemExit, match="does not compile"):
        decode_ab.check_sources(_baseline(tmp_path, CURRENT + "\nthis is not C++;\n"))
    with pytest.raises(SystemExit, match="no baseline kernel: .*fetch_decode.cu is missing"):
        decode_ab.check_sources(tmp_path)


# --------------------------------------------------------------------------------------------
# Rounds and ratios
# --------------------------------------------------------------------------------------------


def test_rounds_alternate_the_order() -> None:
    calls: list[str] = []
    timers = {
        name: (lambda name=name: calls.append(name) or len(calls))
        for name in ("current", "baseline")
    }
    seconds = decode_ab.alternate(timers, 4)
    assert calls == ["current", "baseline", "baseline", "current"] * 2
    assert seconds == {"current": [1, 4, 5, 8], "baseline": [2, 3, 6, 7]}


def test_rounds_rotate_the_order_of_three_versions() -> None:
    calls: list[str] = []
    timers = {name: (lambda name=name: calls.append(name) or 0.0) for name in ("c", "a", "b")}
    decode_ab.alternate(timers, 3)
    assert calls == ["c", "a", "b", "a", "b", "c", "b", "c", "a"]  # each first once


def test_compare_takes_medians_and_per_round_ratios() -> None:
    seconds = {"current": [0.5, 0.25, 1.0], "abc": [1.0, 1.0, 0.5], "def": [0.25, 0.5, 0.5]}
    r = decode_ab.compare(10**9, seconds)
    assert r["current_gbps_rounds"] == pytest.approx([2.0, 4.0, 1.0])
    assert r["current_gbps"] == pytest.approx(2.0)
    abc, other = r["baselines"]
    assert abc["label"] == "abc" and other["label"] == "def"  # in their order
    assert abc["gbps"] == pytest.approx(1.0) and abc["current_over"] == pytest.approx(2.0)
    assert abc["round_ratio_median"] == pytest.approx(2.0)
    assert (abc["round_ratio_min"], abc["round_ratio_max"]) == pytest.approx((0.5, 4.0))
    assert abc["gbps_rounds"] == pytest.approx([1.0, 1.0, 2.0])
    assert other["gbps"] == pytest.approx(2.0) and other["current_over"] == pytest.approx(1.0)
    assert (other["round_ratio_min"], other["round_ratio_max"]) == pytest.approx((0.5, 2.0))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--table-gb", "0"], "--table-gb must be positive"),
        (["--kinds", "dense"], "dense"),
        (["--block-warps", "33"], "block_warps"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, argv, message, capsys) -> None:
    with pytest.raises(SystemExit):
        decode_ab.parse_args(["--baseline", str(_baseline(tmp_path)), *argv])
    assert message in capsys.readouterr().err


def test_baseline_label_comes_from_its_commit_file_or_its_name(tmp_path) -> None:
    folder = _baseline(tmp_path)
    assert decode_ab.parse_args(["--baseline", str(folder)]).baseline_labels == ["abc1234"]
    bare = tmp_path / "bare"
    bare.mkdir()
    args = decode_ab.parse_args(["--baseline", str(folder), "--baseline", str(bare)])
    assert args.baseline_labels == ["abc1234", "bare"]
    assert args.baselines == [folder.resolve(), bare.resolve()]
    args = decode_ab.parse_args(["--baseline", str(bare), "--baseline-label", "v1"])
    assert args.baseline_labels == ["v1"]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--baseline-label", "v1"], "--baseline-label given 1 times for 2 --baseline folders"),
        (["--baseline-label", "v1", "--baseline-label", "v1"], "must differ from each other"),
        (["--baseline-label", "current", "--baseline-label", "v1"], "and from 'current'"),
        (["--baseline", "/no/such/folder"], "--baseline /no/such/folder is not a folder"),
    ],
)
def test_bad_baselines_are_refused(tmp_path, extra, message, capsys) -> None:
    one, two = _baseline(tmp_path, name="one"), _baseline(tmp_path, name="two")
    with pytest.raises(SystemExit):
        decode_ab.parse_args(["--baseline", str(one), "--baseline", str(two), *extra])
    assert message in capsys.readouterr().err


def test_two_baselines_with_the_same_commit_need_labels(tmp_path, capsys) -> None:
    one, two = _baseline(tmp_path, name="one"), _baseline(tmp_path, name="two")
    with pytest.raises(SystemExit):
        decode_ab.parse_args(["--baseline", str(one), "--baseline", str(two)])
    assert "(abc1234, abc1234) must differ" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# A run with the stand-in launcher
# --------------------------------------------------------------------------------------------


def _stand_in(monkeypatch, *, breaks: str | None = None) -> list[str]:
    """The NumPy fused fetch in place of the kernel; the versions it ran, in order: current,
    or a baseline's folder name. The version named ``breaks`` gets one bit wrong."""
    ran: list[str] = []

    def launch(codec, idx, out, error, **kw) -> None:
        folder = runtime._SOURCES.get()
        version = "current" if folder is None else Path(folder).name
        ran.append(version)
        numpy_fetch_decode(codec, idx, out, error, **kw)
        if version == breaks:
            out.view(torch.uint8)[0, 0] ^= 1  # one wrong bit

    monkeypatch.setattr(cuda_table, "fetch_decode", launch)
    return ran


def _run(tmp_path: Path, argv: list[str], baselines: list[str] | None = None) -> dict:
    if baselines is None:
        baselines = ["--baseline", str(_baseline(tmp_path))]
    args = decode_ab.parse_args([*baselines, *SMALL, *argv, "--out", str(tmp_path)])
    env = {"device": "CPU: test", "git_commit": "def5678", "date": "d", "command": "c"}
    return decode_ab.run(args, torch.device("cpu"), env)


def test_a_run_times_both_versions_and_checks_both(monkeypatch, tmp_path, nvrtc) -> None:
    ran = _stand_in(monkeypatch)
    payload = _run(tmp_path, ["--kinds", "dense-normal,sparse-5pct,random-bits"])
    assert set(ran) == {"current", "baseline"}
    by_case = {r["case"]: r for r in payload["cases"]}
    assert list(by_case) == ["dense-normal-256B", "sparse-5pct-256B", "random-bits-256B"]
    assert "stored raw" in by_case["random-bits-256B"]["skipped"]
    for name in ("dense-normal-256B", "sparse-5pct-256B"):
        r = by_case[name]
        (b,) = r["baselines"]
        assert r["current_bit_identical"] and b["bit_identical"] and b["label"] == "abc1234"
        assert len(r["current_gbps_rounds"]) == len(b["gbps_rounds"]) == 3
        assert b["current_over"] == pytest.approx(r["current_gbps"] / b["gbps"])
        assert r["ratio"] > 1  # the table's compression, not the versions' ratio
        assert r["batch_rows"] == 300 and r["table_rows"] % 64 == 0
        # Decoded from memory, not from L2: the stored rows are tiled past it.
        assert r["l2_bytes"] == fetch.CPU_L2_BYTES
        assert r["stored_bytes"] >= fetch.L2_POOL_FACTOR * r["l2_bytes"]
        assert r["pool_fits_l2"] == (r["pool_stored_bytes"] < fetch.L2_FIT_FACTOR * r["l2_bytes"])
    doc = json.loads((tmp_path / "decode-ab-cpu.json").read_text())
    assert doc["settings"]["baseline_labels"] == ["abc1234"]
    assert doc["settings"]["same_text"] == [True]
    assert doc["git_commit"] == "def5678"
    md = (tmp_path / "decode-ab-cpu.md").read_text()
    assert "baseline: `fetch_decode.cu` at abc1234 (" in md
    assert "| abc1234 GB/s | current / abc1234 | per round |" in md
    sparse = by_case["sparse-5pct-256B"]
    argv = ["--baseline", str(tmp_path / "baseline"), *SMALL]
    argv += ["--kinds", "dense-normal,sparse-5pct,random-bits"]
    cases, _ = decode_ab.build_cases(decode_ab.parse_args(argv))
    rows = next(c.rows for c in cases if c.name == "sparse-5pct-256B")
    table = ibp_graph.compress(rows, tmp_path / "check.ibp", progress=False)
    assert sparse["ratio"] == pytest.approx(float(table.ratio))  # the compression
    assert f"| sparse-5pct-256B | 256 | {sparse['ratio']:.3f}x | 95% |" in md  # compression
    assert f"| {sparse['baselines'][0]['current_over']:.3f}x |" in md
    # Rows a second beside the GB/s: the same rate over the row width.
    mrows = sparse["current_gbps"] * 1e9 / 256 / 1e6
    assert f"| {fetch._num(sparse['current_gbps'])} | {fetch._num(mrows)} | " in md
    assert "| random-bits-256B | 256 | 1.000x |" in md
    # The current kernel against the decode-only goal of its table's class.
    assert sparse["decode_target"]["table_class"] == "sparse"
    assert sparse["decode_target"]["value"] == sparse["current_gbps"]
    assert by_case["dense-normal-256B"]["decode_target"]["goal"] == 400.0
    assert sparse["decode_target"]["goal"] == 1000.0 and sparse["decode_target"]["met"] is False
    assert f"| {fetch._decode_cell(sparse['decode_target'])} |" in md
    assert f"{sparse['current_gbps']:.1f} **gap " in fetch._decode_cell(sparse["decode_target"])
    assert "Decode-only goal (the current kernel): met in 0 of 2 cases; missed: " in md


def test_tile_is_fetch_table_tiles_past_four_l2s(monkeypatch, tmp_path) -> None:
    """decode_ab tiles a case as fetch.py does (`fetch.table_tiles`): raw bytes, or past 4x L2."""
    cases = fetch.synthetic_cases([256], ["dense-normal", "sparse-5pct"], rows=64, seed=0)
    table_bytes, l2 = 2**20, fetch.CPU_L2_BYTES  # 1 MiB of raw rows, stored under 4x L2
    asked: list[tuple] = []
    real = fetch.table_tiles
    monkeypatch.setattr(fetch, "table_tiles", lambda *a: asked.append(a) or real(*a))
    for case in cases:
        table = ibp_graph.compress(case.rows, tmp_path / f"{case.name}.ibp", progress=False)
        block = fetch.stored_block(table).size
        t = decode_ab.tile(case, table, table_bytes, l2, torch.device("cpu"))
        assert asked[-1] == (table_bytes, 64, 256, block, l2)
        assert t.times == real(table_bytes, 64, 256, block, l2)
        assert t.times > fetch.tiles(table_bytes, 64, 256)  # tiled past the raw bytes' copies
        assert t.rows.numel() - 64 == t.times * block >= fetch.L2_POOL_FACTOR * l2
        assert t.num_rows == t.times * 64
        tiled = t.rows[: t.times * block].view(t.times, block).numpy()
        assert (tiled == fetch.stored_block(table)).all()  # every copy the block's bytes
        table.close()


def test_the_decode_goal_is_judged_only_at_the_full_grid() -> None:
    full = decode_ab.decode_target(1200.0, 0.95, None)
    assert full["met"] and full["applies"] and full["goal"] == 1000.0
    assert fetch._decode_cell(full) == "1200.0 met [sparse, 95% zeros: goal 1000]"
    dense = decode_ab.decode_target(300.0, 0.0, None)
    assert dense["met"] is False and dense["gap"] == pytest.approx(0.25)
    assert fetch._decode_cell(dense) == "300.0 **gap 25.0%** [dense, 0% zeros: goal 400]"
    capped = decode_ab.decode_target(300.0, 0.0, 0.25)
    assert not capped["applies"]
    assert fetch._decode_cell(capped) == "(300.0)"  # not judged on a capped grid
    cases = [
        {"case": "a", "decode_target": full},
        {"case": "b", "decode_target": dense},
        {"case": "c", "decode_target": capped},
        {"case": "d", "skipped": "stored raw"},
    ]
    assert decode_ab.target_summary(cases) == (
        "Decode-only goal (the current kernel): met in 1 of 2 cases; missed: b."
    )
    assert "no case measured at the full grid" in decode_ab.target_summary(cases[2:])


def test_a_baseline_that_decodes_wrong_rows_is_reported(monkeypatch, tmp_path, nvrtc) -> None:
    _stand_in(monkeypatch, breaks="baseline")
    (r,) = _run(tmp_path, ["--kinds", "sparse-5pct"])["cases"]
    assert r["current_bit_identical"] and not r["baselines"][0]["bit_identical"]
    assert "| False |" in (tmp_path / "decode-ab-cpu.md").read_text()


def test_a_run_with_two_baselines_times_and_checks_all_three(monkeypatch, tmp_path, nvrtc) -> None:
    ran = _stand_in(monkeypatch, breaks="older")
    newer = _baseline(tmp_path, commit="1111111", name="newer")
    older = _baseline(tmp_path, CURRENT + "// older\n", commit="2222222", name="older")
    flags = ["--baseline", str(newer), "--baseline", str(older)]
    payload = _run(tmp_path, ["--kinds", "sparse-5pct"], baselines=flags)
    assert set(ran) == {"current", "newer", "older"}
    (r,) = payload["cases"]
    assert [b["label"] for b in r["baselines"]] == ["1111111", "2222222"]
    assert r["current_bit_identical"] and r["baselines"][0]["bit_identical"]
    assert not r["baselines"][1]["bit_identical"]  # the older one got a bit wrong
    assert payload["settings"]["same_text"] == [True, False]
    md = (tmp_path / "decode-ab-cpu.md").read_text()
    assert "baselines: `fetch_decode.cu` at 1111111, 2222222 (" in md
    assert "the same text: 1111111)" in md
    header = next(line for line in md.splitlines() if line.startswith("| case |"))
    assert "| current / 1111111 |" in header and "| current / 2222222 |" in header
    row = next(line for line in md.splitlines() if line.startswith("| sparse-5pct-256B"))
    assert row.count("|") == header.count("|")  # every column filled
    for b in r["baselines"]:
        assert f"| {b['current_over']:.3f}x |" in row


def test_the_baseline_launches_its_own_source(monkeypatch, tmp_path, nvrtc) -> None:
    """Inside the baseline's launches, the launcher's kernel comes from the baseline folder."""
    built: list[str] = []
    monkeypatch.setattr(runtime, "_kernel", lambda source, entry, device: built.append(source))

    def launch(codec, idx, out, error, **kw) -> None:
        runtime.kernel(decode_ab.SOURCE, "ibp_fetch_decode_w4_o4", 0)  # as the launcher asks
        numpy_fetch_decode(codec, idx, out, error, **kw)

    monkeypatch.setattr(cuda_table, "fetch_decode", launch)
    _run(tmp_path, ["--kinds", "sparse-5pct"])
    folder = (tmp_path / "baseline").resolve()
    assert set(built) == {decode_ab.SOURCE, str(folder / decode_ab.SOURCE)}


def test_time_budget_leaves_later_cases_unstarted(monkeypatch, tmp_path, nvrtc) -> None:
    _stand_in(monkeypatch)
    payload = _run(tmp_path, ["--kinds", "sparse-5pct,dense-normal", "--time-budget", "1e-9"])
    assert [r.get("skipped", "") for r in payload["cases"]] == [
        "not started: --time-budget spent"
    ] * 2
    assert np.isnan(payload["cases"][0]["ratio"])
    md = (tmp_path / "decode-ab-cpu.md").read_text().splitlines()
    header = next(line for line in md if line.startswith("| case |"))
    skipped = [line for line in md if "not started" in line]
    assert len(skipped) == 2 and all(row.count("|") == header.count("|") for row in skipped)


def test_dry_run_compares_the_sources_and_builds_the_cases(tmp_path, capsys, nvrtc) -> None:
    args = [
        "--baseline", str(_baseline(tmp_path)), *SMALL, "--dry-run", "--out", str(tmp_path),
    ]  # fmt: skip
    payload = decode_ab.main(args)
    assert payload["settings"]["same_text"] == [True]
    assert "sparse-5pct-256B: ratio" in capsys.readouterr().err
    assert not list(tmp_path.glob("decode-ab-*"))  # a dry run writes no results


def test_double_buffer_times_the_current_sources_double_buffered_kernel(
    monkeypatch, tmp_path, nvrtc
) -> None:
    """--double-buffer: the current source's double-buffered kernel is one more version."""
    buffered: list[bool] = []

    def launch(codec, idx, out, error, **kw) -> None:
        buffered.append(bool(kw.get("double_buffer")) and runtime._SOURCES.get() is None)
        numpy_fetch_decode(codec, idx, out, error, **kw)
        if kw.get("double_buffer"):
            out.view(torch.uint8)[0, 0] ^= 1  # the db version gets one bit wrong

    monkeypatch.setattr(cuda_table, "fetch_decode", launch)
    payload = _run(tmp_path, ["--kinds", "sparse-5pct", "--double-buffer"])
    assert any(buffered) and payload["settings"]["double_buffer"] is True
    (r,) = payload["cases"]
    assert [b["label"] for b in r["baselines"]] == ["abc1234", decode_ab.DB_LABEL]
    db = r["baselines"][1]
    assert len(db["gbps_rounds"]) == 3 and not db["bit_identical"]  # checked like a baseline
    assert r["current_bit_identical"] and r["baselines"][0]["bit_identical"]
    md = (tmp_path / "decode-ab-cpu.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| case |"))
    assert f"| current / {decode_ab.DB_LABEL} |" in header
    row = next(line for line in md.splitlines() if line.startswith("| sparse-5pct-256B"))
    assert row.count("|") == header.count("|") and f"| {db['current_over']:.3f}x |" in row
    assert f"{decode_ab.DB_LABEL}: the current source's double-buffered entry points" in md


def test_double_buffer_leaves_out_rows_too_wide_for_two_buffers(
    monkeypatch, tmp_path, nvrtc
) -> None:
    def launch(codec, idx, out, error, **kw) -> None:
        if kw.get("double_buffer"):
            raise ValueError("rows of 9,999 B are too wide for a raw gather or one buffer")
        numpy_fetch_decode(codec, idx, out, error, **kw)

    monkeypatch.setattr(cuda_table, "fetch_decode", launch)
    payload = _run(tmp_path, ["--kinds", "sparse-5pct,dense-normal", "--double-buffer"])
    for r in payload["cases"]:
        assert [b["label"] for b in r["baselines"]] == ["abc1234"]
        assert "one buffer" in r["double_buffer_note"]
    md = (tmp_path / "decode-ab-cpu.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| case |"))
    row = next(line for line in md.splitlines() if line.startswith("| dense-normal-256B"))
    assert row.count("|") == header.count("|") and "| n/a | n/a | n/a |" in row
    assert (
        "Not double-buffered (rows too wide for two staging buffers): sparse-5pct-256B, "
        "dense-normal-256B." in md
    )


def test_a_baseline_may_not_take_the_double_buffered_label(tmp_path, capsys) -> None:
    argv = ["--baseline", str(_baseline(tmp_path)), "--baseline-label", decode_ab.DB_LABEL]
    with pytest.raises(SystemExit):
        decode_ab.parse_args(argv)
    assert f"from 'current' and '{decode_ab.DB_LABEL}'" in capsys.readouterr().err
