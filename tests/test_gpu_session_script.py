"""benchmarks/gpu_session.sh, checked on the CPU: stages, limits, `prepare`, command lines.

A GPU machine is lent for minutes: its script must be right before it gets there. These
tests run the script's own checks (syntax, unknown stages, the 8-file limit on what comes
back, the printed device calls) and `prepare` in a temporary copy, and parse each benchmark
command line of a stage with the benchmark's own argument parser. Nothing here needs a GPU.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from benchmarks import (
    decode_ab,
    e2e,
    fetch,
    gil_handoff,
    overlap,
    pages,
    profile_fetch,
    sampling,
    upstream_examples,
)

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_session.sh"
STAGES = (
    "smoke",
    "tests",
    "sanitize",
    "decodeab",
    "fetch",
    "profile",
    "pages",
    "grid",
    "warps",
    "lanes",
    "sampling",
    "e2e",
    "overlap",
    "ophops",
    "ddp",
    "synthetic",
    "corasu",
    "gil",
    "examples",
)
MAX_FILES = 8
MAX_COMMAND = 2000
#: How the script's tests stage finds the files marking tests gpu or timing (`files_marking`):
#: a decorator, an item of a module's pytestmark list, a ``gpu = pytest.mark.gpu`` alias;
#: never these words inside a string.
MARKED = {
    name: re.compile(rf"^\s*(@|gpu = )?pytest\.mark\.{name}\b", re.M) for name in ("gpu", "timing")
}


def script(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    """Run the script found under ``cwd`` (the checkout, or a copy of its benchmarks/)."""
    return subprocess.run(
        ["bash", str(cwd / "benchmarks" / "gpu_session.sh"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
        timeout=120,
    )


def stage_commands() -> dict[str, list[list[str]]]:
    """The python benchmark command lines of each stage, with the script's variables filled."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    found: dict[str, list[list[str]]] = {}
    for m in re.finditer(r"python3 benchmarks/(\w+)\.py (.*?)\|\|\s*\w*rc=", text, re.S):
        argv = shlex.split(m.group(2))
        subst = {
            "$WORK": "/tmp/w",
            "$WORK/overlap": "/tmp/w/overlap",
            "$features": "f.npy",
            "$raw_kernel": "lines",  # the loop of the lanes stage: auto, then lines
            "$DATA/baseline-cuda": str(REPO),  # a folder that exists here
        }
        # decodeab's baselines: --baseline and a folder each (one here)
        expand = {"${baselines[@]}": ["--baseline", str(REPO)]}
        argv = [b for a in argv for b in expand.get(a, [a])]
        found.setdefault(m.group(1), []).append(
            ["/tmp/o" + a[4:] if a.startswith("$OUT") else subst.get(a, a) for a in argv]
        )
    return found


def written_paths(argv: list[str]) -> list[str]:
    """The files or folders a benchmark command line writes or reads under $OUT."""
    paths = [argv[i + 1] for i, a in enumerate(argv) if a in ("--out", "--manifest")]
    if "--summarise" in argv:
        i = argv.index("--summarise")
        paths += argv[i + 1 : i + 3]
    return paths


def test_syntax_and_every_stage_is_handled() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    for stage in STAGES:
        assert re.search(rf"^\s*{stage}\)\s*$", text, re.M), f"no case branch for '{stage}'"
        assert re.search(rf"^#\s+{stage}\s+about", text, re.M), f"no time estimate for '{stage}'"
    assert "compute-sanitizer --tool" in text
    assert all(tool in text for tool in ("memcheck", "racecheck", "synccheck"))
    assert "nvidia-smi" in text and "pcie.link.gen" in text and "IBP_GRAPH_COMMIT" in text


def test_device_scripts_run_python3_the_one_python_the_gpu_image_promises() -> None:
    # The image's `python3` holds torch; a bare `python` may not exist there.
    for sh in sorted((REPO / "benchmarks").glob("*.sh")):
        for n, line in enumerate(sh.read_text().splitlines(), 1):
            assert not re.search(r"(^\s*|[;&|({]\s*|\bexec\s+)python\s", line), f"{sh.name}:{n}"


def test_unknown_stage_is_refused_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = script("smoke", "nonsense", OUT=str(out), IBP_GPU_WORK=str(tmp_path / "w"))
    assert done.returncode == 2 and "unknown stage 'nonsense'" in done.stderr
    assert not out.exists()  # refused before installing or writing anything
    assert script().returncode == 2  # no stage: the help, as a usage error


def _files(stages: list[str]) -> int:
    done = script("--plan", *stages)
    assert done.returncode == 0, done.stderr
    return int(re.search(r"files under \$OUT: (\d+)", done.stdout).group(1))


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_alone_fits_what_comes_back(stage: str) -> None:
    assert 2 <= _files([stage]) <= MAX_FILES


def test_a_command_writing_more_than_8_files_is_refused(tmp_path: Path) -> None:
    assert _files(["smoke", "tests", "sanitize"]) == 4
    assert _files(["smoke", "tests", "decodeab", "sanitize"]) == 7  # the first call
    done = script("e2e", "synthetic", OUT=str(tmp_path / "out"))
    assert done.returncode == 2 and "would write 9 files" in done.stderr
    assert not (tmp_path / "out").exists()


def test_files_written_per_stage_match_the_plan() -> None:
    """The plan counts what each stage writes: its log plus the benchmark's result files."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    for stage in STAGES:
        logs = set(re.findall(rf"\b({stage}\.log)\b", text))
        assert logs == {f"{stage}.log"}, stage
    # Benchmarks write straight under $OUT (results come back even when a stage is cut off).
    for name, argvs in stage_commands().items():
        for argv in argvs:
            paths = written_paths(argv)
            assert paths, f"{name} {argv} names no output"
            for out in paths:
                assert out.startswith("/tmp/o"), f"{name} writes to {out}, not under $OUT"
                assert out.count("/") - "/tmp/o".count("/") <= 1  # at most one folder down


def test_stage_commands_parse_with_the_benchmarks_own_parsers() -> None:
    cmds = stage_commands()
    assert set(cmds) == {
        "decode_ab",
        "fetch",
        "pages",
        "sampling",
        "e2e",
        "overlap",
        "profile_fetch",
        "gil_handoff",
        "upstream_examples",
    }
    # examples: PyG's scripts as prepare copied them, a short limit per script.
    (ux,) = (upstream_examples.parse_args(c) for c in cmds["upstream_examples"])
    assert str(ux.pyg) == "$DATA/upstream/pyg" and ux.pyg_rev is None and ux.dgl is None
    assert str(ux.out) == "/tmp/o" and ux.export is None and ux.timeout <= 120
    # decodeab: the decoder against its previous version, side by side, on every table.
    (ab,) = (decode_ab.parse_args(c) for c in cmds["decode_ab"])
    assert ab.baselines == [REPO] and ab.real and str(ab.out) == "/tmp/o" and not ab.dry_run
    assert ab.kinds == ["dense-normal", "sparse-5pct"] and ab.widths == [512]
    assert ab.rounds >= 4 and ab.rounds % 2 == 0  # each order as often
    assert ab.max_blocks is None and ab.block_warps is None and ab.time_budget <= 200
    assert ab.double_buffer  # the current source's double-buffered kernel beside the rest
    driver, again, summarise = (profile_fetch.parse_args(c) for c in cmds["profile_fetch"])
    for run in (driver, again):  # with the extra metrics, then with the sections alone
        assert str(run.manifest) == "/tmp/o/profile-manifest.json" and not run.dry_run
        assert run.cases == list(profile_fetch.CASES) and run.table_gb == 1.0
        assert run.batch == 100_000 and run.summarise is None
    assert [str(p) for p in summarise.summarise] == [
        "/tmp/o/ncu-fetch.csv",
        "/tmp/o/profile-manifest.json",
    ]
    assert str(summarise.out) == "/tmp/o/profile.md"
    warps_ov, ov = (overlap.parse_args(c) for c in cmds["overlap"])
    assert ov.device == "cuda" and str(ov.out) == "/tmp/o" and ov.tables == ["dense", "sparse"]
    assert ov.block_warps == [] and ov.chunk_rows and ov.max_blocks
    # warps: the default grid in blocks of 8 (the default), 16 and 32 warps, nothing else.
    assert warps_ov.block_warps == [16, 32] and str(warps_ov.out) == "/tmp/o/warps"
    assert warps_ov.max_blocks == [] and warps_ov.chunk_rows == []
    assert warps_ov.profile_case is None and warps_ov.tables == ov.tables
    full, grid, warps, lanes = (fetch.parse_args(c) for c in cmds["fetch"])
    assert warps.block_warps == [8, 32] and warps.max_blocks == grid.max_blocks == 0.25
    assert warps.tag == "grid-warps" and warps.kinds == grid.kinds and warps.widths == grid.widths
    assert full.block_warps is None and grid.block_warps is None
    assert full.pages == "huge"
    # pages: every page kind side by side, at the fetch's table size and batch.
    (kinds,) = (pages.parse_args(c) for c in cmds["pages"])
    assert kinds.kinds == ["huge", "small", "cuda"] and kinds.table_gb == full.table_gb
    assert kinds.batch == min(full.batch) and str(kinds.out) == "/tmp/o"
    assert kinds.time_budget < 200 and not kinds.dry_run
    # grid: a side-stream fetch's grid, against fetch's default (every block the SMs hold).
    assert full.max_blocks is None and grid.max_blocks == 0.25 and grid.tag == "grid"
    assert grid.widths == [512] and grid.real and grid.pages == "huge"
    assert full.raw_kernel == "auto" and lanes.raw_kernel == "lines"
    assert full.sort_ids and not lanes.sort_ids
    assert full.double_buffer and not lanes.double_buffer
    assert "for raw_kernel in auto lines; do" in SCRIPT.read_text()
    assert all(w % 16 for w in lanes.widths) and lanes.tag == "lanes"
    for args in (full, grid, warps, lanes):
        assert args.table_gb >= 2 and args.time_budget <= 400
        assert min(args.batch) >= 100_000 and max(args.batch) <= 1_000_000
    bundled, ophops, synthetic, corasu = (e2e.parse_args(c) for c in cmds["e2e"])
    assert bundled.graph_list == ["cora", "citeseer"] and bundled.device == "cuda"
    # Epochs of 40-50 ms: enough of them for a median over the modes' turns.
    assert bundled.epochs == 21
    # The loaders' default sampler backend on a GPU (the fused hop kernels); ophops compares
    # the same epochs with torch-op hops.
    assert bundled.sampler_backend is None and not bundled.prefetch_thread
    # The prefetch thread as a mode of its own, beside the others (same run, same batches).
    assert bundled.thread_mode and ophops.thread_mode and not ophops.prefetch_thread
    assert ophops.graph_list == bundled.graph_list and ophops.epochs == bundled.epochs
    assert ophops.sampler_backend == "torch"
    assert synthetic.sampler_backend is None and corasu.sampler_backend is None
    assert bundled.profile_epoch and ophops.profile_epoch  # cheap on the small graphs only
    assert not synthetic.profile_epoch and not corasu.profile_epoch
    assert str(ophops.out) == "/tmp/o/ophops"
    assert synthetic.synthetic_nodes == 20_000_000 and synthetic.graph_list == []
    assert synthetic.epochs == 3 and synthetic.device == "cuda"
    assert synthetic.workdir == "/tmp/w" and str(synthetic.out) == "/tmp/o/synthetic"
    assert synthetic.setting == "papers100m" and synthetic.synthetic_edges == 300_000_000
    # The loaders' default on a GPU: batches prepared on the prefetch thread.
    assert synthetic.prefetch_thread and corasu.prefetch_thread
    # IBP on again with chunked fetches, on whole epochs beside the other modes.
    assert synthetic.chunk_mode == corasu.chunk_mode == 4096 and bundled.chunk_mode is None
    assert corasu.setting == "corasu" and corasu.graph_list == []
    assert corasu.synthetic_nodes == 2_449_029 and corasu.synthetic_features == "cora"
    assert corasu.epochs == 6 and corasu.device == "cuda" and str(corasu.out) == "/tmp/o/corasu"
    # sampling: both backends (the default on CUDA), the fused hops at two grids.
    (samp,) = (sampling.parse_args(c) for c in cmds["sampling"])
    assert samp.device == "cuda" and samp.backend is None and str(samp.out) == "/tmp/o"
    assert samp.hop_grids == [None, 32.0] and samp.graph_memory == [
        "device",
        "uva",
        "uva-separate",
        "device-pairs",
    ]
    # replayed from CUDA graphs, and both ways again with the seeds from the host (loaders)
    assert samp.cuda_graph and samp.host_seeds
    # gil: the step of short ops beside the threads and Cora's loaders, on the GPU.
    (gil,) = (gil_handoff.parse_args(c) for c in cmds["gil_handoff"])
    assert gil.device == "cuda" and str(gil.out) == "/tmp/o" and not gil.no_loader
    assert gil.ops >= 100 and gil.rounds >= 3 and 0.005 in gil.switch_intervals


def test_stage_limits_end_the_command_before_the_device_kills_it() -> None:
    text = SCRIPT.read_text()
    deadline = int(re.search(r"IBP_GPU_DEADLINE:-(\d+)", text).group(1))
    assert deadline < 600
    limits = [int(x) for x in re.findall(r"^\s*run (\d+) \w+\.log", text, re.M)]
    assert limits and max(limits) < 600


def test_prepare_fills_the_carry_folder_and_prints_the_device_calls(tmp_path: Path) -> None:
    # A copy of the checkout's tracked files, with a tiny stand-in datasets folder.
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "benchmarks" / "gpu_session.sh")
    shared = tmp_path / "datasets"
    (shared / "planetoid").mkdir(parents=True)
    (shared / "planetoid" / "x.txt").write_text("rows")
    os.chmod(shared / "planetoid", 0o555)  # the shared folder is read-only
    fake_py = tmp_path / "python"  # derives the table without SciPy or the real data
    fake_py.write_text(
        "#!/usr/bin/env bash\n"
        f"exec {shlex.quote(str(Path(sys.executable)))} -c "
        "\"import numpy as np; np.save('device_data/facebook-svd100-float32.npy', "
        'np.zeros((4, 100), np.float32))"\n'
    )
    fake_py.chmod(0o755)
    try:
        for _ in range(2):  # a second prepare replaces the read-only copy
            done = script(
                "prepare",
                cwd=repo,
                PYTHON=str(fake_py),
                IBP_GRAPH_SHARED_DATASETS=str(shared),
            )
            assert done.returncode == 0, done.stderr
    finally:
        os.chmod(shared / "planetoid", 0o755)
    data = repo / "device_data"
    assert (data / "datasets" / "planetoid" / "x.txt").read_text() == "rows"
    assert np.load(data / "facebook-svd100-float32.npy").shape == (4, 100)
    calls = re.findall(
        r"run\(command='([^']*)', carry=\['device_data'\], timeout_s=600\)", done.stdout
    )
    assert calls, done.stdout
    # Each call's estimate fits the 10 minutes a device command may run.
    minutes = [int(m) for m in re.findall(r"at most about (\d+) min", done.stdout)]
    assert len(minutes) == len(calls) and max(minutes) <= 10
    covered = set()
    for cmd in calls:
        assert len(cmd) <= MAX_COMMAND
        assert cmd.startswith("IBP_GRAPH_COMMIT=") and "bash benchmarks/gpu_session.sh" in cmd
        stages = cmd.split("gpu_session.sh", 1)[1].split()
        assert _files(stages) <= MAX_FILES
        covered |= set(stages)
    assert covered == set(STAGES)
    stages_of = [c.split("gpu_session.sh", 1)[1].split() for c in calls]
    # The smoke test first, every GPU test in the first two calls, and the decoder A/B with
    # the sanitizers right after the tests in the call that runs them again.
    assert stages_of[0][0] == "smoke"
    assert "tests" in stages_of[0] + stages_of[1]
    assert ["smoke", "tests", "decodeab", "sanitize"] in stages_of
    assert "baseline: not a git checkout; the decodeab stage will refuse" in done.stdout
    assert not (data / "baseline-cuda").exists()
    assert "examples: IBP_GRAPH_PYG is not set" in done.stdout
    assert not (data / "upstream").exists()
    # A minute of PyG's own scripts on our loader, then CoraSU (never run) in the second
    # call, then the sampler's groups (host time per batch, the largest gap) with the epochs,
    # then the profile: its counts per source line steer the decoder's next changes.
    assert stages_of[1] == ["examples", "corasu"] and stages_of[2] == ["sampling", "e2e"]
    assert stages_of[3] == ["profile"]
    # and, once the results are back, the verdicts they give
    assert done.stdout.rstrip().endswith("python benchmarks/scoreboard.py")
    assert "prepare" in script("prepare", "smoke").stderr


@pytest.mark.parametrize("how", ["folder", "git"])
def test_prepare_copies_pygs_example_scripts_for_the_examples_stage(tmp_path: Path, how) -> None:
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    for name in ("gpu_session.sh", "upstream_examples.py"):
        shutil.copy(REPO / "benchmarks" / name, repo / "benchmarks" / name)
    pyg = tmp_path / "pyg"
    (pyg / "examples").mkdir(parents=True)
    theirs = upstream_examples.SWAPS["pyg"][0]
    scripts = {e.script for e in upstream_examples.EXAMPLES if e.framework == "pyg"}
    for name in scripts:  # some in a folder of examples/ (multi_gpu/)
        (pyg / "examples" / name).parent.mkdir(parents=True, exist_ok=True)
        (pyg / "examples" / name).write_text(f"# {name}\n{theirs}\n")
    assert any("/" in name for name in scripts)
    env = {"IBP_GRAPH_PYG": str(pyg)}
    if how == "git":  # a bare repository, read at a revision
        _git(pyg, "init", "-q")
        _git(pyg, "add", ".")
        _git(pyg, "commit", "-q", "-m", "examples")
        for name in scripts:
            (pyg / "examples" / name).write_text("changed after the commit\n")
        bare = tmp_path / "pyg.git"
        _git(tmp_path, "clone", "-q", "--bare", str(pyg), str(bare))
        env = {"IBP_GRAPH_PYG": str(bare), "IBP_GRAPH_PYG_REV": "HEAD"}
    done = _prepare(repo, tmp_path, **env)
    assert done.returncode == 0, done.stderr
    for name in scripts:
        copied = repo / "device_data" / "upstream" / "pyg" / "examples" / name
        assert copied.read_text() == f"# {name}\n{theirs}\n"  # as upstream has it
    # A checkout without the scripts stops prepare with one line.
    done = _prepare(repo, tmp_path, IBP_GRAPH_PYG=str(tmp_path / "nowhere"))
    assert done.returncode == 1 and "could not copy PyG's example scripts" in done.stderr


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **env}, check=True)  # fmt: skip
    return done.stdout.strip()


def _checkout_with_two_decoders(tmp_path: Path, first: str) -> tuple[Path, str]:
    """A git checkout of the script whose cuda/fetch_decode.cu was ``first``, then the
    package's; and the first commit's short name."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "cuda").mkdir()
    shutil.copy(SCRIPT, repo / "benchmarks" / "gpu_session.sh")
    _git(repo, "init", "-q")
    (repo / "cuda" / "fetch_decode.cu").write_text(first)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    sha = _git(repo, "rev-parse", "--short", "HEAD")
    shutil.copy(REPO / "cuda" / "fetch_decode.cu", repo / "cuda" / "fetch_decode.cu")
    (repo / "notes.txt").write_text("a later commit that leaves the decoder alone")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "second")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "third")
    return repo, sha


def _prepare(repo: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return script(
        "prepare",
        cwd=repo,
        PYTHON=sys.executable,
        PYTHONPATH=str(REPO),  # the checkout's benchmarks.decode_ab compares the sources
        IBP_GRAPH_SHARED_DATASETS=str(tmp_path / "none"),
        **env,
    )


def test_prepare_writes_the_decoders_previous_version_for_decodeab(tmp_path: Path, nvrtc) -> None:
    current = (REPO / "cuda" / "fetch_decode.cu").read_text()
    older = current + "\n#define IBP_AN_OLDER_VERSION 1\n"  # other code, the same entry points
    repo, first = _checkout_with_two_decoders(tmp_path, older)
    done = _prepare(repo, tmp_path)
    assert done.returncode == 0, done.stderr
    baseline = repo / "device_data" / "baseline-cuda"
    assert f"baseline: cuda/fetch_decode.cu at {first} -> device_data/baseline-cuda" in done.stdout
    assert (baseline / "fetch_decode.cu").read_text() == older
    assert (baseline / "COMMIT").read_text().strip() == first
    second = repo / "device_data" / "baseline-cuda-2"
    assert not second.exists()  # the history holds one other version
    # A commit that changes comments and spacing alone is no version to measure against.
    reworded = current.replace("// ", "//  ", 3) + "\n/* reworded */\n"
    (repo / "cuda" / "fetch_decode.cu").write_text(reworded)
    _git(repo, "commit", "-q", "-am", "comments")
    done = _prepare(repo, tmp_path)
    assert (baseline / "COMMIT").read_text().strip() == first
    # A decoder whose code changes in the working tree is compared with HEAD's; one whose
    # comments alone change, with the version before.
    (repo / "cuda" / "fetch_decode.cu").write_text(reworded + "\n// being reworded\n")
    done = _prepare(repo, tmp_path)
    assert (baseline / "COMMIT").read_text().strip() == first
    (repo / "cuda" / "fetch_decode.cu").write_text(reworded + "\n#define IBP_BEING_CHANGED 1\n")
    done = _prepare(repo, tmp_path)
    assert (baseline / "fetch_decode.cu").read_text() == reworded
    assert (baseline / "COMMIT").read_text().strip() == _git(repo, "rev-parse", "--short", "HEAD")
    # ... and the version before it with other code again (not "second", whose code is HEAD's)
    assert (second / "fetch_decode.cu").read_text() == older
    assert (second / "COMMIT").read_text().strip() == first
    assert "-> device_data/baseline-cuda-2" in done.stdout
    # IBP_GRAPH_AB_VERSIONS=1: the newest alone.
    done = _prepare(repo, tmp_path, IBP_GRAPH_AB_VERSIONS="1")
    assert (baseline / "fetch_decode.cu").read_text() == reworded and not second.exists()
    # IBP_GRAPH_AB_BASE names the commit (and only it), or several, in that order.
    done = _prepare(repo, tmp_path, IBP_GRAPH_AB_BASE=first)
    assert (baseline / "fetch_decode.cu").read_text() == older and not second.exists()
    head = _git(repo, "rev-parse", "--short", "HEAD")
    done = _prepare(repo, tmp_path, IBP_GRAPH_AB_BASE=f"{first} {head}")
    assert (baseline / "COMMIT").read_text().strip() == first
    assert (second / "COMMIT").read_text().strip() == head
    assert (second / "fetch_decode.cu").read_text() == reworded
    # No earlier version with other code (one commit, then one to comments alone): said, and
    # decodeab refuses.
    alone = tmp_path / "alone"
    alone.mkdir()
    repo, _ = _checkout_with_two_decoders(alone, current + "\n// older comments\n")
    done = _prepare(repo, alone)
    assert done.returncode == 0, done.stderr
    assert "no cuda/fetch_decode.cu at 'an earlier commit with other code'" in done.stdout
    assert not (repo / "device_data" / "baseline-cuda").exists()


def test_prepare_refuses_a_previous_decoder_the_launcher_cannot_launch(
    tmp_path: Path, nvrtc
) -> None:
    current = (REPO / "cuda" / "fetch_decode.cu").read_text()
    macro = "const W* __restrict__ runs) {"  # the entry points' last parameter
    wider = current.replace(macro, macro.replace("runs)", "runs, int x)"))
    assert wider.count("int x)") == 1
    repo, first = _checkout_with_two_decoders(tmp_path, wider)
    done = _prepare(repo, tmp_path)
    assert done.returncode == 0, done.stderr  # the other stages can still run
    assert "takes other parameters" in done.stderr
    assert "baseline: refused (above); the decodeab stage will refuse" in done.stdout
    assert not (repo / "device_data" / "baseline-cuda").exists()
    # An older version refused, or missing, after a newer one accepted: the newer one stays.
    newer, older = repo / "device_data" / "baseline-cuda", repo / "device_data" / "baseline-cuda-2"
    for base, said in (
        (first, "refused (above)"),
        ("no-such", "no cuda/fetch_decode.cu at 'no-such'"),
    ):
        done = _prepare(repo, tmp_path, IBP_GRAPH_AB_BASE=f"HEAD {base}")
        lines = [line for line in done.stdout.splitlines() if line.startswith("baseline: ")]
        assert lines == [
            f"baseline: cuda/fetch_decode.cu at {_git(repo, 'rev-parse', '--short', 'HEAD')} "
            "-> device_data/baseline-cuda",
            f"baseline: {said}; the decodeab stage compares the newer version(s) alone",
        ], done.stdout
        assert (newer / "fetch_decode.cu").is_file() and not older.exists()


def test_prepare_refuses_a_carry_folder_over_64_mib(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "benchmarks" / "gpu_session.sh")
    (repo / "device_data").mkdir()
    with open(repo / "device_data" / "big.bin", "wb") as f:
        f.truncate(65 << 20)  # sparse: du -b counts its apparent size
    done = script("prepare", cwd=repo, IBP_GRAPH_SHARED_DATASETS=str(tmp_path / "none"))
    assert done.returncode == 1 and "over the 64 MiB" in done.stderr


def test_without_a_gpu_the_script_logs_the_machine_and_stops_clearly(tmp_path: Path) -> None:
    """The GPU machine's path up to the GPU check, run here with stand-in tools."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"  # pip is a no-op; everything else is this interpreter
    python.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then exit 0; fi\n'
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/usr/bin/env bash\necho 'name, driver_version'\necho 'Stand-in, 1.0'\n")
    for tool in (python, smi):
        tool.chmod(0o755)
    out = tmp_path / "out"
    done = script(
        "smoke",
        OUT=str(out),
        IBP_GPU_WORK=str(tmp_path / "w"),
        IBP_GRAPH_COMMIT="abc1234",
        PATH=f"{bin_dir}:{os.environ['PATH']}",
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no GPU" in done.stderr
    summary = (out / "summary.txt").read_text()
    assert "commit: abc1234" in summary and "Stand-in, 1.0" in summary
    # The machine's memory as /proc/meminfo says it, and the size the size checks take.
    assert re.search(
        r"memory: MemTotal: \d+ kB;MemAvailable: \d+ kB, IBP_GRAPH_HOST_MEMORY=128G", summary
    )
    assert "transparent huge pages: enabled " in summary  # what the pinned buffers may get
    assert "torch 2." in summary or "torch sees no CUDA device" in summary
    assert sorted(p.name for p in out.iterdir()) == ["summary.txt"]


def stand_in_tools(tmp_path: Path, csv_text: str) -> Path:
    """python3, nvidia-smi and ncu stand-ins for the profile stage, in a folder for $PATH.

    python3: pip and the GPU check pass; the driver plans (a dry run of one small case)
    instead of profiling. ncu: runs the command it is given and writes a report; refuses
    ``--metrics`` (as an ncu that does not know one does) when $NCU_REFUSE_METRICS is set;
    ``--import`` prints ``csv_text``, except its source page where $NCU_NO_SOURCE is set
    (as an ncu without one), and the page's CUDA view where $NCU_NO_CUDA is.
    """
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "ncu.csv").write_text(csv_text)
    py = shlex.quote(sys.executable)
    fixture = shlex.quote(str(tmp_path / "ncu.csv"))
    tools = {
        "python3": (
            'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then exit 0; fi\n'
            'if [ "$1" = "-c" ]; then exit 0; fi\n'
            'if [ "$1" = benchmarks/profile_fetch.py ] && [ "$2" = --manifest ]; then\n'
            f'    exec {py} "$@" --dry-run --cases sparse-5pct-512B --table-gb 0.002 '
            "--batch 500 --block-rows 64\n"
            "fi\n"
            f'exec {py} "$@"\n'
        ),
        "nvidia-smi": "echo 'name, driver_version'\necho 'Stand-in, 1.0'\n",
        "ncu": (
            'if [ "$1" = --version ]; then echo "ncu stand-in"; exit 0; fi\n'
            'if [ "$1" = --import ] && [ -n "$NCU_NO_SOURCE" ] && [[ " $* " == *" source "* ]]\n'
            "then echo '==ERROR== unknown page'; exit 1; fi\n"
            'if [ "$1" = --import ] && [ -n "$NCU_NO_CUDA" ] && [[ " $* " == *" cuda"* ]]\n'
            "then echo '==ERROR== no source file'; exit 1; fi\n"
            f'if [ "$1" = --import ]; then cat {fixture}; exit 0; fi\n'
            'echo "IBP_GRAPH_LINEINFO=$IBP_GRAPH_LINEINFO ncu $*" >>"$OUT/ncu-calls.txt"\n'
            'if [ -n "$NCU_REFUSE_METRICS" ] && [[ " $* " == *" --metrics "* ]]; then\n'
            '    echo "==ERROR== Failed to find metric regex:^nonesuch$"\n'
            "    exit 1\n"
            "fi\n"
            'args=("$@")\n'
            'for i in "${!args[@]}"; do\n'
            '    case "${args[$i]}" in\n'
            "    --export) report=${args[$((i + 1))]} ;;\n"
            '    python3) "${args[@]:$i}" || exit $?; break ;;\n'
            "    esac\n"
            "done\n"
            'echo report >"$report.ncu-rep"\n'
        ),
    }
    for name, body in tools.items():
        tool = bin_dir / name
        tool.write_text("#!/usr/bin/env bash\n" + body)
        tool.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("refuse_metrics", [False, True])
def test_profile_stage_with_stand_in_tools(refuse_metrics: bool, tmp_path: Path) -> None:
    """The profile stage end to end: ncu over the driver, the CSV, the summary, the files."""
    csv_text = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"\n'
        '"0","1","python3","h","ibp_raw_gather_v16","1","7","(256, 1, 1)","(132, 1, 1)","0",'
        '"9.0","GPU Speed Of Light Throughput","Duration","nsecond","10,000"\n'
    )
    bin_dir = stand_in_tools(tmp_path, csv_text)
    out = tmp_path / "out"
    env = {"NCU_REFUSE_METRICS": "1"} if refuse_metrics else {}
    done = script(
        "profile",
        OUT=str(out),
        IBP_GPU_WORK=str(tmp_path / "w"),
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        **env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    calls = (out / "ncu-calls.txt").read_text().splitlines()
    (out / "ncu-calls.txt").unlink()  # the stand-in's record, not the stage's
    assert len(calls) == (2 if refuse_metrics else 1)
    assert "--metrics" in calls[0] and "--clock-control none" in calls[0]
    assert ("--metrics" in calls[-1]) == (not refuse_metrics)
    assert all("--profile-from-start off" in c for c in calls)
    # Kernels built with line information, and counts per source line collected.
    assert all(c.startswith("IBP_GRAPH_LINEINFO=1 ncu ") for c in calls)
    assert all("--section SourceCounters --import-source yes" in c for c in calls)
    log = (out / "profile.log").read_text()
    assert ("again with the sections alone" in log) == refuse_metrics
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(
        ["summary.txt", "profile.log", "profile-manifest.json", "ncu-fetch.ncu-rep",
         "ncu-fetch.csv", "ncu-source.csv", "profile.md"]
    )  # fmt: skip
    assert len(files) == _files(["profile"])
    md = (out / "profile.md").read_text()
    assert "| 0 | sparse-5pct-512B | raw | ibp_raw_gather_v16 | 500 | 512 | 10.0 | 25.6 |" in md
    assert "ncu has 1 results and the manifest 5 profiled launches" in md
    summary = (out / "summary.txt").read_text()
    assert "ncu stand-in" in summary and "profile rc=0" in summary


def _stand_in_sanitizer(tmp_path: Path, body: str = "") -> Path:
    """A compute-sanitizer stand-in that logs each call (tool, environment, arguments) to
    $OUT/sanitizer-calls.txt; given a tool, it runs ``body``, then reports 0 errors."""
    bin_dir = stand_in_tools(tmp_path, "")
    sanitizer = bin_dir / "compute-sanitizer"
    sanitizer.write_text(
        "#!/usr/bin/env bash\n"
        'echo "$2 sanitizer=$IBP_GRAPH_SANITIZER caching_off=${PYTORCH_NO_CUDA_MEMORY_CACHING:-}'
        ' shard=${IBP_GRAPH_TEST_SHARD:-} $*" >>"$OUT/sanitizer-calls.txt"\n'
        'if [ "$1" != --tool ]; then exit 0; fi\n'
        f"{body}"
        'echo "========= ERROR SUMMARY: 0 errors"\n'
    )
    sanitizer.chmod(0o755)
    return bin_dir


def _sanitize(tmp_path: Path, bin_dir: Path) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    done = script(
        "sanitize", OUT=str(out), IBP_GPU_WORK=str(tmp_path / "w"),
        PATH=f"{bin_dir}:{os.environ['PATH']}", IBP_GPU_SANITIZER_STAGGER="0",
    )  # fmt: skip
    return done, out


def test_sanitize_stage_runs_the_three_tools_at_once_with_what_the_tests_need(
    tmp_path: Path,
) -> None:
    # Each stand-in waits until all five processes (racecheck in three shards) have started:
    # run one after another, they would wait out their 5 s and say so.
    bin_dir = _stand_in_sanitizer(
        tmp_path,
        'touch "$OUT/started-$2-${IBP_GRAPH_TEST_SHARD/\\//-of-}"\n'
        "for _ in $(seq 50); do\n"
        '    [ "$(ls "$OUT" | grep -c ^started-)" -ge 5 ] && break\n'
        "    sleep 0.1\n"
        "done\n"
        '[ "$(ls "$OUT" | grep -c ^started-)" -ge 5 ] || echo "ran alone" >>"$OUT/alone.txt"\n',
    )
    done, out = _sanitize(tmp_path, bin_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (out / "alone.txt").exists()
    calls = [c for c in (out / "sanitizer-calls.txt").read_text().splitlines() if "--tool" in c]
    assert sorted(c.split()[:4] for c in calls) == [
        ["memcheck", "sanitizer=memcheck", "caching_off=1", "shard="],
        ["racecheck", "sanitizer=racecheck", "caching_off=", "shard=1/3"],
        ["racecheck", "sanitizer=racecheck", "caching_off=", "shard=2/3"],
        ["racecheck", "sanitizer=racecheck", "caching_off=", "shard=3/3"],
        ["synccheck", "sanitizer=synccheck", "caching_off=", "shard="],
    ]
    # Each process's log, whole, in the one log that comes back.
    log = (out / "sanitize.log").read_text()
    sections = dict(re.findall(r"^-- ([\w.]+) rc=0\n(.*?)(?=^-- |\Z)", log, re.M | re.S))
    jobs = ["memcheck", "racecheck.1", "racecheck.2", "racecheck.3", "synccheck"]
    assert sorted(sections) == jobs
    assert all("ERROR SUMMARY: 0 errors" in body for body in sections.values())
    stand_in = ("started-", "sanitizer-calls.txt")  # the stand-in's own records
    files = sorted(p.name for p in out.iterdir() if not p.name.startswith(stand_in))
    assert files == ["sanitize.log", "summary.txt"]
    for call in calls:
        assert "--error-exitcode" in call and "gpu and not slow" in call
        assert "tests/test_gpu_kernels.py" in call
        # racecheck checks shared memory, which the sampler's kernels do not use.
        assert ("tests/test_sampler_hop_host.py" in call) == (not call.startswith("racecheck"))
    summary = (out / "summary.txt").read_text()
    assert all(f"\n{job} rc=0\n" in summary for job in jobs)
    assert summary.count("ERROR SUMMARY: 0 errors") == 5


def test_a_tool_that_cannot_start_beside_the_others_runs_again_alone(tmp_path: Path) -> None:
    # racecheck's second shard fails its first start as a sanitizer that cannot reach its
    # target does; a finding (an error summary) is never run again.
    bin_dir = _stand_in_sanitizer(
        tmp_path,
        'if [ "$IBP_GRAPH_TEST_SHARD" = 2/3 ] && [ ! -e "$OUT/failed-once" ]; then\n'
        '    touch "$OUT/failed-once"\n'
        '    echo "========= Error: No attachable process found."\n'
        "    exit 1\n"
        "fi\n"
        'if [ "$2" = synccheck ]; then echo "========= ERROR SUMMARY: 1 error"; exit 86; fi\n',
    )
    done, out = _sanitize(tmp_path, bin_dir)
    assert done.returncode == 1  # synccheck's finding
    calls = (out / "sanitizer-calls.txt").read_text().splitlines()
    assert [c.split()[0] for c in calls].count("racecheck") == 3 + 1
    assert [c.split()[3] for c in calls].count("shard=2/3") == 2
    assert [c.split()[0] for c in calls].count("synccheck") == 1
    summary = (out / "summary.txt").read_text()
    assert "racecheck.2 rc=1 beside the others; again alone" in summary
    assert "racecheck.2 rc=0 (alone)" in summary and "synccheck rc=86" in summary
    assert "racecheck.1 rc=0" in summary and "racecheck.3 rc=0" in summary
    log = (out / "sanitize.log").read_text()
    assert "-- racecheck.2 rc=1\n========= Error: No attachable process found." in log
    assert "-- racecheck.2 rc=0, again alone\n" in log and "-- synccheck rc=86\n" in log


def _python(code: str) -> subprocess.CompletedProcess:
    """``code`` run by this Python in the checkout; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done


def test_a_test_shard_keeps_every_nth_test_and_the_shards_keep_each_once() -> None:
    """IBP_GRAPH_TEST_SHARD (tests/conftest.py), which the sanitize stage splits racecheck
    with: the shards of a selection are disjoint and together the whole selection."""
    # One process collects twice: the whole selection, then shard 2/3 of it.
    code = (
        "import os, sys, pytest\n"
        "args = ['--collect-only', '-q', '-p', 'no:cacheprovider', '-m', 'gpu and not slow',"
        " 'tests/test_gpu_kernels.py']\n"
        "for shard in ('', '2/3'):\n"
        "    os.environ['IBP_GRAPH_TEST_SHARD'] = shard\n"
        "    print('SHARD', repr(shard), flush=True)\n"
        "    if pytest.main(args) != 0:\n"
        "        sys.exit(1)\n"
    )
    done = _python(code)
    ids: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("SHARD "):
            shard = ids.setdefault(line.split(" ", 1)[1], [])
        elif "::" in line:
            shard.append(line)
    whole = ids["''"]
    assert len(whole) > 3 and ids["'2/3'"] == whole[1::3]  # in the suite's order
    # Bad values: test_the_shard_hook_splits_a_selection_into_disjoint_parts, in-process.


def test_the_shard_hook_splits_a_selection_into_disjoint_parts(monkeypatch) -> None:
    """The hook itself, in this process: every shard of 7 selected tests, and bad values."""
    from conftest import pytest_collection_modifyitems as shard

    deselected: list = []
    config = types.SimpleNamespace(
        hook=types.SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items))
    )
    whole = [f"test_{i}" for i in range(7)]
    shards = []
    for i in (1, 2, 3):
        monkeypatch.setenv("IBP_GRAPH_TEST_SHARD", f"{i}/3")
        items, deselected[:] = list(whole), []
        shard(config, items)
        assert items == whole[i - 1 :: 3] and sorted(items + deselected) == whole
        shards.append(items)
    assert sorted(sum(shards, [])) == whole  # each test in exactly one shard
    for bad in ("0/3", "4/3", "2", "a/b"):
        monkeypatch.setenv("IBP_GRAPH_TEST_SHARD", bad)
        with pytest.raises(pytest.UsageError, match=f"1 <= i <= n, got '{bad}'"):
            shard(config, list(whole))


def test_the_gpu_tests_collect_without_dgl_and_ogb() -> None:
    # The GPU image has neither: the `tests` stage must collect every file, not error on one.
    # Each collected test's file and whether it is marked `timing`, as pytest sees it.
    code = (
        "import sys; sys.modules.update(dict.fromkeys(['dgl', 'ogb'])); import pytest\n"
        "class Marks:\n"
        "    def pytest_collection_finish(self, session):\n"
        "        for item in session.items:\n"
        "            timing = item.get_closest_marker('timing') is not None\n"
        "            print('MARKS', item.path.name, timing)\n"
        "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', '-m', 'gpu', "
        "'tests'], plugins=[Marks()]))"
    )
    done = _python(code)
    assert "error" not in done.stdout.splitlines()[-1], done.stdout[-3000:]
    marks = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("MARKS ")]
    assert "test_gpu_smoke.py" in {name for name, _ in marks}
    # The files the script finds by their marks are the files pytest collects, but for the
    # DGL loader's, which skips whole without DGL.
    found = {
        f"tests/{p.name}" for p in (REPO / "tests").glob("test_*.py")
        if MARKED["gpu"].search(p.read_text())
    }  # fmt: skip
    assert found - {f"tests/{name}" for name, _ in marks} == {"tests/test_loader_dgl.py"}
    assert {f"tests/{name}" for name, _ in marks} <= found
    assert sorted({f"tests/{name}" for name, timing in marks if timing == "True"}) == sorted(
        f"tests/{p.name}" for p in (REPO / "tests").glob("test_*.py")
        if MARKED["timing"].search(p.read_text())
    )  # fmt: skip


@pytest.mark.parametrize("jobs", [3, 1])
def test_tests_stage_runs_files_side_by_side_then_the_timing_tests_alone(
    tmp_path: Path, jobs: int
) -> None:
    """The tests stage with a stand-in pytest: JOBS files at a time, each log in tests.log,
    a failing file failing the stage, and the `timing` tests last, in a process alone."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {
        "python3": (
            'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then exit 0; fi\n'
            'if [ "$1" = "-c" ]; then exit 0; fi\n'  # the GPU check
            'if [ "$1" != "-m" ] || [ "$2" != "pytest" ]; then exit 99; fi\n'
            'args=("$@"); expr=; files=()\n'
            'for i in "${!args[@]}"; do\n'
            '    if [ "${args[$i]}" = -m ]; then expr=${args[$((i + 1))]}; fi\n'
            '    case "${args[$i]}" in tests/*) files+=("${args[$i]}") ;; esac\n'
            "done\n"
            'touch "$OUT/running-$$"\n'
            "sleep 0.4\n"  # every process started by now is running beside this one
            'n=$(ls "$OUT" | grep -c ^running-)\n'
            'echo "$n|$expr|${files[*]}" >>"$OUT/pytest-calls.txt"\n'
            "sleep 0.2\n"
            'rm "$OUT/running-$$"\n'
            'echo "pytest of ${files[*]}"\n'
            'case "${files[*]}" in\n'
            '*test_kernels.py) echo "1 failed"; exit 1 ;;\n'
            '*test_loader_dgl.py) echo "1 skipped"; exit 5 ;;\n'  # none collected
            "esac\n"
        ),
        "nvidia-smi": "echo 'name, driver_version'\necho 'Stand-in, 1.0'\n",
    }
    for name, body in tools.items():
        (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
        (bin_dir / name).chmod(0o755)
    out = tmp_path / "out"
    done = script(
        "tests", OUT=str(out), IBP_GPU_WORK=str(tmp_path / "w"), IBP_GPU_TEST_JOBS=str(jobs),
        PATH=f"{bin_dir}:{os.environ['PATH']}",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # test_kernels.py failed
    gpu_files = sorted(
        f"tests/{p.name}"
        for p in (REPO / "tests").glob("test_*.py")
        if MARKED["gpu"].search(p.read_text()) and p.name != "test_gpu_smoke.py"
    )
    timing = [f for f in gpu_files if MARKED["timing"].search((REPO / f).read_text())]
    assert "tests/test_gpu_kernels.py" in timing and "tests/test_prefetch_streams.py" in timing
    calls = [c.split("|") for c in (out / "pytest-calls.txt").read_text().splitlines()]
    per_file = calls[:-1]
    assert sorted(c[2] for c in per_file) == gpu_files  # each file once, in a process of its own
    assert all(c[1] == "gpu and not timing" for c in per_file)
    assert max(int(c[0]) for c in per_file) == jobs  # JOBS at a time, never more
    assert calls[-1] == ["1", "gpu and timing", " ".join(timing)]  # last, and alone
    log = (out / "tests.log").read_text()
    for f in gpu_files:  # each file's output under its name
        assert f"-- {f}\npytest of {f}\n" in log
    summary = (out / "summary.txt").read_text()
    assert "tests/test_kernels.py rc=1" in summary and "tests/test_loader_dgl.py rc=5" in summary
    assert f"timing: {' '.join(timing)} rc=0" in summary and "tests rc=1" in summary
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("pytest-calls")) == [
        "summary.txt",
        "tests.log",
    ]


def profile_with_stand_ins(tmp_path: Path, csv_text: str, **env: str) -> Path:
    """The profile stage over `stand_in_tools` with ``env``; its $OUT, once it succeeded."""
    bin_dir = stand_in_tools(tmp_path, csv_text)
    out = tmp_path / "out"
    path = f"{bin_dir}:{os.environ['PATH']}"
    done = script("profile", OUT=str(out), IBP_GPU_WORK=str(tmp_path / "w"), PATH=path, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_profile_stage_without_a_source_page(tmp_path: Path) -> None:
    """An ncu that prints no source page: logged, no empty file, the stage still succeeds."""
    csv_text = (
        '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","ibp_raw_gather_v16","GPU Speed Of Light Throughput","Duration","nsecond",'
        '"10,000"\n'
    )
    out = profile_with_stand_ins(tmp_path, csv_text, NCU_NO_SOURCE="1")
    assert not (out / "ncu-source.csv").exists()
    log = (out / "profile.log").read_text()
    assert "==ERROR== unknown page" in log
    assert "no source page from this ncu (see above); the details stand alone" in log
    assert (out / "ncu-fetch.csv").exists() and (out / "profile.md").exists()
    assert "profile rc=0" in (out / "summary.txt").read_text()


def test_profile_stage_falls_back_to_the_sass_view_of_the_source_page(tmp_path: Path) -> None:
    """Without the CUDA view (no line information), the per-instruction view is kept."""
    out = profile_with_stand_ins(
        tmp_path, '"Kernel Name","k"\n"Address","Source"\n', NCU_NO_CUDA="1"
    )
    log = (out / "profile.log").read_text()
    assert "==ERROR== no source file" in log and "-- source page: per sass line" in log
    assert (out / "ncu-source.csv").read_text().startswith('"Kernel Name","k"')
