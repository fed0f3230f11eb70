"""The kernels' source under g++'s sanitizers on the host (``tests/simt/sanitize.py``).

Kernels with known faults show that each sanitized build reports its kind of fault (and that a
correct kernel runs clean); then the host kernel tests run under each build. The CI run takes a
subset of those tests (`sanitize.CI_SUBSET`), started beside the whole suite as soon as it is
collected (``tests/conftest.py``); ``python tests/simt/sanitize.py <sanitizers>`` runs them all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from simt import harness, sanitize

ROOT = sanitize.ROOT

#: Runs one self-check kernel of ``tests/simt/simt_selfcheck.cpp`` in a harness built (once,
#: at argv[1]) with the sanitizers of the environment.
SELFCHECK = """
import ctypes, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from simt.harness import build
path = Path(sys.argv[1])
lib = ctypes.CDLL(str(path)) if path.exists() else build(path)
lib.simt_selfcheck.restype = ctypes.c_uint
print("sum", lib.simt_selfcheck(int(sys.argv[2])))
"""


def _environment(names: str) -> dict[str, str]:
    try:
        return sanitize.environment(sanitize.parse(names))
    except sanitize.SanitizerUnavailable as exc:
        pytest.skip(str(exc))


def _run(cmd: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    """``cmd`` under a sanitizer; skips (saying why) where its runtime cannot start here."""
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    why = sanitize.startup_failure(done.stderr) if done.returncode else None
    if why is not None:
        pytest.skip(f"the sanitizer cannot run on this machine: {why}")
    return done


def _selfcheck(lib: Path, which: int, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Self-check kernel ``which`` in the harness at ``lib`` (built there once, with the
    sanitizers ``env`` names)."""
    code = SELFCHECK.format(tests=str(ROOT / "tests"))
    return _run([sys.executable, "-c", code, str(lib), str(which)], env, 300)


@pytest.fixture(scope="module")
def harness_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sanitized")


@pytest.mark.parametrize(
    ("names", "which", "report"),
    [
        ("thread", 0, None),
        ("thread", 1, "ThreadSanitizer: data race"),
        ("address,undefined", 0, None),
        ("address,undefined", 2, "AddressSanitizer: heap-buffer-overflow"),
        ("address,undefined", 3, "shift exponent 32 is too large"),
        ("address,undefined", 4, "misaligned address"),
    ],
    ids=[
        "thread-clean",
        "thread-shuffle-only",
        "address-clean",
        "address-past-shared",
        "shift",
        "misaligned-vector",
    ],
)
def test_each_sanitized_build_reports_its_fault(harness_dir, names, which, report) -> None:
    lib = harness_dir / f"lib-{names.replace(',', '-')}.so"
    done = _selfcheck(lib, which, _environment(names))
    if report is None:
        assert done.returncode == 0, done.stderr[-3000:]
        assert "sum" in done.stdout
    else:
        assert done.returncode != 0, done.stdout
        assert report in done.stderr, done.stderr[-3000:]
        assert "selfcheck_kernel" in done.stderr  # the report names the faulty kernel


#: The sanitizers the host kernel tests run under.
KERNEL_TEST_SANITIZERS = ["address,undefined", "thread"]
#: Seconds a run of the host kernel tests under one sanitizer may take.
KERNEL_TEST_TIMEOUT_S = 1200


@pytest.mark.slow
@pytest.mark.parametrize("names", KERNEL_TEST_SANITIZERS)
def test_host_kernel_tests_pass_under_the_sanitizer(names, sanitized_runs) -> None:
    try:
        run = sanitize.ci_run_result(names, sanitized_runs, KERNEL_TEST_TIMEOUT_S)
    except TimeoutError as exc:
        pytest.fail(str(exc))
    if isinstance(run, str):
        pytest.skip(run)
    code, out = run
    why = sanitize.startup_failure(out) if code else None
    if why is not None:
        pytest.skip(f"the sanitizer cannot run on this machine: {why}")
    assert code == 0, out[-6000:]
    assert " passed" in out and "failed" not in out


@pytest.mark.parametrize(
    ("which", "signal_number", "message"),
    [
        (5, signal.SIGABRT, "16 lanes of a warp ended while 16 waited at a shuffle, vote or "
         "__syncwarp (warp-divergent barrier)"),
        (6, signal.SIGSEGV, None),
    ],
    ids=["divergent-barrier", "stack-overflow"],
)  # fmt: skip
def test_the_harness_stops_a_kernel_it_cannot_run_faithfully(
    harness_dir, which, signal_number, message
) -> None:
    """A ``__syncwarp`` only some lanes reach (undefined on a GPU) is named and stops the
    process, where it used to hang; a lane past its stack faults on the guard page below it
    instead of writing over another lane's."""
    lib = harness_dir / "lib-plain.so"
    plain = {k: v for k, v in os.environ.items() if k != sanitize.SANITIZE_ENV}
    done = _selfcheck(lib, which, plain)
    assert done.returncode == -signal_number and "sum" not in done.stdout, done.stderr[-3000:]
    if message is not None:
        assert message in done.stderr
    ok = _selfcheck(lib, 0, plain)  # the same harness runs a warp whose lanes all reach it
    assert ok.returncode == 0 and "sum 1344" in ok.stdout, ok.stderr[-3000:]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("memory", "unknown sanitizer memory"),
        ("address,leak", "unknown sanitizer leak"),
        (",", "unknown sanitizer ','"),
        ("thread,address", "cannot build thread with address"),
    ],
)
def test_bad_sanitizer_lists_get_one_line_errors(spec, message) -> None:
    with pytest.raises(ValueError, match=message) as info:
        sanitize.parse(spec)
    assert "\n" not in str(info.value)


def test_parse_keeps_the_names_given() -> None:
    assert sanitize.parse(" address , undefined ") == ["address", "undefined"]
    assert sanitize.parse("thread") == ["thread"]


def test_the_runtimes_load_first_and_the_build_is_told(monkeypatch) -> None:
    found = {"libasan.so": "/x/libasan.so", "libubsan.so": "/x/libubsan.so"}

    def fake_runtimes(names):
        order = sorted(names, key=list(sanitize.RUNTIMES).index)
        return [found[sanitize.RUNTIMES[n]] for n in order]

    monkeypatch.setattr(sanitize, "runtimes", fake_runtimes)
    env = sanitize.environment(["undefined", "address"], {"LD_PRELOAD": "/mine.so", "KEEP": "1"})
    assert env["LD_PRELOAD"] == "/x/libasan.so /x/libubsan.so /mine.so"
    assert env[sanitize.SANITIZE_ENV] == "undefined,address"
    assert env["KEEP"] == "1" and env["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv(sanitize.SANITIZE_ENV, env[sanitize.SANITIZE_ENV])
    assert "-fsanitize=undefined,address" in sanitize.sanitizer_flags()
    monkeypatch.delenv(sanitize.SANITIZE_ENV)
    assert sanitize.sanitizer_flags() == []


def test_pytest_command_runs_the_host_kernel_tests_unless_told_otherwise() -> None:
    cmd = sanitize.pytest_command(["-k", "db"])
    assert cmd[-3:] == list(sanitize.HOST_KERNEL_TESTS) and "--capture=sys" in cmd
    for named in (["tests/test_kernels_host.py"], ["tests/test_kernels_host.py::test_x"]):
        assert sanitize.pytest_command(named)[-2:] == ["no:cacheprovider", named[0]]
    assert all((ROOT / f).is_file() for f in sanitize.HOST_KERNEL_TESTS)


def test_a_runtime_that_cannot_start_is_told_apart_from_a_report() -> None:
    failed = "FATAL: ThreadSanitizer: unexpected memory mapping 0x5f2a-0x5f2b\n"
    assert sanitize.startup_failure("noise\n" + failed) == failed.strip()
    assert sanitize.startup_failure("WARNING: ThreadSanitizer: data race (pid=1)") is None


def test_the_script_refuses_a_bad_list_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests/simt/sanitize.py"), "threads"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "sanitize: unknown sanitizer threads: name one or more of address, undefined, thread"
    )


@pytest.mark.parametrize("werror, expected", [(None, True), ("1", True), ("0", False)])
def test_warnings_stop_the_harness_build_unless_told_otherwise(
    monkeypatch, tmp_path, werror, expected
) -> None:
    seen = []

    def compile_only(cmd, **kwargs):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "stopped here")

    monkeypatch.setattr(harness.subprocess, "run", compile_only)
    monkeypatch.setenv(harness.CACHE_ENV, str(tmp_path / "cache"))  # none built there yet
    if werror is None:
        monkeypatch.delenv("IBP_GRAPH_SIMT_WERROR", raising=False)
    else:
        monkeypatch.setenv("IBP_GRAPH_SIMT_WERROR", werror)
    with pytest.raises(harness.HarnessBuildError, match="stopped here"):
        harness.build(tmp_path / "lib.so")
    assert ("-Werror" in seen[0]) is expected and "-Wall" in seen[0]


def test_the_compiler_runs_without_the_sanitizers_preloaded(monkeypatch, tmp_path) -> None:
    """The sanitized runs preload the runtimes into every process they start; g++, which
    builds the harness, runs without them (under them it took half again as long), and
    keeps any other library preloaded."""
    envs = []

    def compile_only(cmd, **kwargs):
        envs.append(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 1, "", "stopped here")

    monkeypatch.setattr(harness.subprocess, "run", compile_only)
    monkeypatch.setenv(harness.CACHE_ENV, str(tmp_path / "cache"))
    for preload, kept in (
        ("/usr/lib/libtsan.so.2 /opt/mine.so", "/opt/mine.so"),
        ("/x/libasan.so.8 /x/libubsan.so.1", None),
    ):
        monkeypatch.setenv("LD_PRELOAD", preload)
        with pytest.raises(harness.HarnessBuildError, match="stopped here"):
            harness.build(tmp_path / "lib.so")
        assert envs[-1].get("LD_PRELOAD") == kept
        assert envs[-1]["PATH"] == os.environ["PATH"]


def test_a_wait_for_a_sanitized_run_gives_its_skip_reason_its_result_or_a_timeout(
    tmp_path,
) -> None:
    (tmp_path / "thread.skip").write_text("g++ has no libtsan.so (the thread sanitizer)")
    assert sanitize.ci_run_result("thread", tmp_path, 5).startswith("g++ has no libtsan.so")
    (tmp_path / "address-undefined.log").write_text("1 failed")
    (tmp_path / "address-undefined.status").write_text("1")
    assert sanitize.ci_run_result("address,undefined", tmp_path, 5) == (1, "1 failed")
    with pytest.raises(TimeoutError, match="under thread,undefined took over 0.2 s"):
        sanitize.ci_run_result("thread,undefined", tmp_path, 0.2)


def test_a_stopped_run_has_its_status_written(tmp_path) -> None:
    runs = sanitize.start_ci_runs(["thread", "thread"], tmp_path)
    if not runs:
        pytest.skip((tmp_path / "thread.skip").read_text())
    assert len(runs) == 1  # one run a sanitizer list
    sanitize.stop_runs(runs)  # killed at once, and its status written
    assert (tmp_path / "thread.status").read_text() == str(-signal.SIGKILL)
    assert sanitize.ci_run_result("thread", tmp_path, 0)[0] == -signal.SIGKILL


def test_a_harness_build_is_compiled_once_per_command_and_sources(monkeypatch, tmp_path) -> None:
    """With a cache folder, the same command on the same sources links the first build."""
    compiled = []

    def compile_into(cmd, **kwargs):
        out = Path(cmd[cmd.index("-o") + 1])
        out.write_text(f"build {len(compiled)}")
        compiled.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(harness.subprocess, "run", compile_into)
    monkeypatch.setattr(harness.ctypes, "CDLL", lambda path: Path(path).read_text())
    monkeypatch.setenv(harness.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(sanitize.SANITIZE_ENV, raising=False)
    assert harness.build(tmp_path / "a.so") == "build 0"
    assert harness.build(tmp_path / "b.so") == "build 0" and len(compiled) == 1
    assert harness.build(tmp_path / "a.so", defines=("SIMT_UCONTEXT",)) == "build 1"
    monkeypatch.setenv(sanitize.SANITIZE_ENV, "thread")  # another command: -fsanitize=thread
    assert harness.build(tmp_path / "c.so") == "build 2"
    assert sorted(p.name for p in (tmp_path / "cache").glob("*.so")) == sorted(
        f"libsimt-{harness._key([*c[: c.index('-o')]])}.so" for c in compiled
    )
    assert not list((tmp_path / "cache").glob("*.part"))
    monkeypatch.delenv(harness.CACHE_ENV)  # no folder: every build compiles
    assert harness.build(tmp_path / "d.so") == "build 3"
    assert harness.build(tmp_path / "d.so") == "build 4"


def test_lanes_switched_with_ucontext_run_a_warp_alike(tmp_path) -> None:
    """The harness switches lanes in a few instructions on x86-64 and with ucontext elsewhere
    (``-DSIMT_UCONTEXT`` forces it here): that way too a warp's lanes run to the sum the
    tests above get, and a divergent ``__syncwarp`` is stopped."""
    lib = tmp_path / "selfcheck.so"
    plain = {k: v for k, v in os.environ.items() if k != sanitize.SANITIZE_ENV}
    try:
        harness.build(lib, [harness.HERE / "simt_selfcheck.cpp"], ("SIMT_UCONTEXT",))
    except harness.HarnessBuildError as exc:
        if exc.unsupported:
            pytest.skip(str(exc)[:300])
        raise
    ok = _selfcheck(lib, 0, plain)
    assert ok.returncode == 0 and "sum 1344" in ok.stdout, ok.stderr[-3000:]
    stuck = _selfcheck(lib, 5, plain)
    assert stuck.returncode == -signal.SIGABRT and "warp-divergent barrier" in stuck.stderr


def test_the_ci_runs_keep_a_spread_of_each_tests_cases(monkeypatch) -> None:
    """The collection hook the CI runs set (`sanitize.CI_CASES`), in this process."""
    from types import SimpleNamespace

    from conftest import pytest_collection_modifyitems as hook

    def case(name: str, i: int | None) -> SimpleNamespace:
        return SimpleNamespace(
            path=Path(f"tests/test_{name[0]}.py"), originalname=name,
            name=name if i is None else f"{name}[{i}]",
        )  # fmt: skip

    whole = [case("alone", None), *(case("pair", i) for i in range(2))]
    whole += [case("five", i) for i in range(5)] + [case("seven", i) for i in range(7)]
    deselected: list = []
    config = SimpleNamespace(
        hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items))
    )
    monkeypatch.setenv("IBP_GRAPH_TEST_CASES", "3")
    items = list(whole)
    hook(config, items)
    assert [i.name for i in items] == [
        "alone", "pair[0]", "pair[1]", "five[0]", "five[2]", "five[4]", "seven[0]", "seven[3]",
        "seven[6]",
    ]  # fmt: skip
    assert sorted(map(id, items + deselected)) == sorted(map(id, whole))
    # then the shards split what is left
    monkeypatch.setenv("IBP_GRAPH_TEST_SHARD", "2/2")
    items = list(whole)
    hook(config, items)
    assert [i.name for i in items] == ["pair[0]", "five[0]", "five[4]", "seven[3]"]
    monkeypatch.delenv("IBP_GRAPH_TEST_SHARD")
    for bad in ("1", "0", "x", "-3"):
        monkeypatch.setenv("IBP_GRAPH_TEST_CASES", bad)
        with pytest.raises(pytest.UsageError, match=f"a number >= 2, got '{bad}'"):
            hook(config, list(whole))
    assert sanitize.CI_CASES >= 2


def test_the_harness_builds_without_torch_or_the_package() -> None:
    # A self-check process runs under a sanitizer's runtime, where importing torch alone
    # takes seconds: the build (`simt.harness`) must not need it.
    code = (
        "import sys; sys.path.insert(0, 'tests'); import simt.harness; "
        "print(sorted(m for m in ('torch', 'numpy', 'ibp_graph') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "[]", done.stdout
