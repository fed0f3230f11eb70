"""The host harness of the CUDA kernels under g++'s sanitizers: a memcheck and a racecheck
that need no GPU.

.. code-block:: text

    python tests/simt/sanitize.py address,undefined   # out of bounds, undefined behaviour
    python tests/simt/sanitize.py thread              # races between lanes and warps
    python tests/simt/sanitize.py thread -x -k db     # pytest arguments follow

builds the harness with ``-fsanitize=`` the sanitizers named (``$IBP_GRAPH_SIMT_SANITIZE``, which
`simt.harness.build` reads), loads their runtimes first (``LD_PRELOAD``: Python itself is not
instrumented) and runs pytest on the host kernel tests, or on the test files given. The first
report stops the run with a non-zero exit status and names the kernel's source line.

- ``address``: a kernel reading or writing past a host array (NumPy and torch buffers get red
  zones) or past the dynamic shared memory of its launch (the harness allocates exactly the
  bytes asked for);
- ``undefined``: undefined behaviour in the source, such as a shift by the word's width or more
  (which x86 and a GPU evaluate differently) or a vector load from an address not aligned to
  its size (a GPU faults on it);
- ``thread``: two lanes or warps touching the same bytes, one of them writing, with nothing
  ordering them. As on a GPU, only ``__syncwarp`` orders a warp's memory accesses: the harness's
  shuffles and votes exchange values but order nothing (``simt_host.h``), so shared memory one
  lane writes and another reads with no ``__syncwarp`` between is reported.

The harness runs a warp's lanes as fibers of one thread and tells both sanitizers of every
switch between them, as their fiber interfaces ask. (Where the harness switches with ucontext,
on other machines than x86-64, the address sanitizer also warns once, at the first switch,
that it "doesn't fully support makecontext/swapcontext".)

These check the kernels' source on the host; compute-sanitizer on a GPU remains the real check
(``benchmarks/gpu_session.sh``, stage ``sanitize``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

#: Environment variable naming the sanitizers the harness is built with (g++'s ``-fsanitize=``
#: list: ``address,undefined`` or ``thread``).
SANITIZE_ENV = "IBP_GRAPH_SIMT_SANITIZE"
#: Each sanitizer's runtime library, in the order they must be loaded.
RUNTIMES = {"address": "libasan.so", "undefined": "libubsan.so", "thread": "libtsan.so"}
#: The tests that run the kernels' source on the host (paths from the repository root).
HOST_KERNEL_TESTS = (
    "tests/test_kernels_host.py",
    "tests/test_sampler_kernel_host.py",
    "tests/test_sampler_hop_host.py",
)
ROOT = Path(__file__).resolve().parents[2]
#: Runtime options: a report ends the process (its exit status says so); Python's own
#: allocations are not leaks to report; the thread sanitizer's interceptors check the
#: harness's own calls (memcpy, memset) only, not NumPy's copies of the tests' arrays, which
#: no lane races with (and which took a third of a run's time); BLAS threads are not
#: instrumented (their synchronisation is invisible to the thread sanitizer), so the tests'
#: BLAS runs on one.
OPTIONS = {
    "ASAN_OPTIONS": "detect_leaks=0",
    "UBSAN_OPTIONS": "print_stacktrace=1",
    "TSAN_OPTIONS": "halt_on_error=1 report_signal_unsafe=0 ignore_noninstrumented_modules=1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


#: What a sanitizer's runtime prints when it cannot start on this kernel's memory layout
#: (the thread sanitizer of older g++ with the high address randomisation of newer kernels).
STARTUP_FAILURES = (
    "ThreadSanitizer: unexpected memory mapping",
    "Shadow memory range interleaves with an existing memory mapping",
)


class SanitizerUnavailable(RuntimeError):
    """g++ or a sanitizer's runtime library is missing on this machine."""


def startup_failure(output: str) -> str | None:
    """The line of ``output`` saying the sanitizer's runtime could not start, if any."""
    for line in output.splitlines():
        if any(marker in line for marker in STARTUP_FAILURES):
            return line.strip()
    return None


def sanitizer_flags() -> list[str]:
    """g++ flags for the sanitizers of ``$IBP_GRAPH_SIMT_SANITIZE`` (none when it is unset)."""
    names = os.environ.get(SANITIZE_ENV, "").strip()
    if not names:
        return []
    return [f"-fsanitize={names}", "-fno-sanitize-recover=all", "-g", "-fno-omit-frame-pointer"]


def parse(spec: str) -> list[str]:
    """The sanitizers of a comma-separated list, checked.

    Raises:
        ValueError: an unknown name, or ``thread`` with ``address`` (g++ builds one or the other).
    """
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in RUNTIMES]
    if not names or unknown:
        raise ValueError(
            f"sanitize: unknown sanitizer {', '.join(unknown) or repr(spec)}: "
            f"name one or more of {', '.join(RUNTIMES)}"
        )
    if "thread" in names and "address" in names:
        raise ValueError("sanitize: g++ cannot build thread with address: run them one at a time")
    return names


def runtimes(names: list[str]) -> list[str]:
    """Paths of the runtime libraries of ``names``, in loading order.

    Raises:
        SanitizerUnavailable: no g++, or g++ has no such library here.
    """
    cxx = shutil.which("g++")
    if cxx is None:
        raise SanitizerUnavailable("no g++ to build the sanitized harness")
    paths = []
    for name in sorted(names, key=list(RUNTIMES).index):
        found = subprocess.run(
            [cxx, f"-print-file-name={RUNTIMES[name]}"], capture_output=True, text=True
        ).stdout.strip()
        if not os.path.isabs(found) or not os.path.exists(found):
            raise SanitizerUnavailable(f"g++ has no {RUNTIMES[name]} (the {name} sanitizer)")
        paths.append(found)
    return paths


def environment(names: list[str], base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the sanitizers of ``names`` on."""
    env = dict(os.environ if base is None else base)
    preload = " ".join([*runtimes(names), env.get("LD_PRELOAD", "")]).strip()
    env.update(OPTIONS, LD_PRELOAD=preload)
    env[SANITIZE_ENV] = ",".join(names)
    return env


def without_runtimes(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) less the sanitizers' runtimes preloaded:
    for the compiler that builds the harness, which would otherwise run under them."""
    env = dict(os.environ if base is None else base)
    kept = [
        path
        for path in env.get("LD_PRELOAD", "").split()
        if not Path(path).name.startswith(tuple(lib.split(".")[0] for lib in RUNTIMES.values()))
    ]
    env.pop("LD_PRELOAD", None)
    if kept:
        env["LD_PRELOAD"] = " ".join(kept)
    return env


def pytest_command(args: list[str]) -> list[str]:
    """pytest over ``args``, on the host kernel tests when ``args`` names no test file.

    Output is captured at the Python level only (``--capture=sys``), so that a sanitizer's
    report, written to the process's stderr just before it exits, is not lost with pytest's
    captured output.
    """
    names_tests = any(a.endswith(".py") or "::" in a for a in args)
    files = [] if names_tests else list(HOST_KERNEL_TESTS)
    pytest = [sys.executable, "-m", "pytest", "--capture=sys", "-p", "no:cacheprovider"]
    return [*pytest, *args, *files]


#: pytest ``-k`` of the host kernel tests run in CI under each sanitizer: every kernel and
#: variant (one buffer and double-buffered, 4- and 8-byte words and offsets, raw gather, the
#: sampler's draws and hops), without the slowest tests (real tables, 255 clusters, the
#: output-position and the one-buffer decoder grids), which the full run covers.
CI_SUBSET = (
    "not real_tables and not 255_clusters and not identity_order"
    " and not test_fused_kernel_matches_the_numpy_decoder and not equally_likely"
)
#: ... and of each test left, at most this many cases: its first, middle and last
#: parametrisation (``$IBP_GRAPH_TEST_CASES``, tests/conftest.py): every kernel's code under
#: each sanitizer at both ends of each sweep, in 40% of the time. A fault that only the
#: sizes between reach is left to the full run (``python tests/simt/sanitize.py thread``) and
#: to compute-sanitizer on a GPU; the suite's own run of every case checks their values.
CI_CASES = 3


def _write(path: Path, text: str) -> None:
    """Write ``path`` whole at once: a reader sees it complete or not at all."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


def _stem(folder: Path, names: str) -> Path:
    return folder / names.replace(",", "-")


def start_ci_runs(
    sanitizers: list[str], folder: Path
) -> list[tuple[subprocess.Popen, threading.Thread]]:
    """Start the `CI_SUBSET` of the host kernel tests (`CI_CASES` of each) under each of
    ``sanitizers``, at once.

    Each run is one process writing into ``folder``, per comma-separated list of sanitizers
    ``NAMES`` (commas as dashes): its output in ``NAMES.log`` and, once it ends, its exit
    status in ``NAMES.status``; or, where it cannot run here, why in ``NAMES.skip``
    (`SanitizerUnavailable`). Any process of the machine may wait for them (`ci_run_result`):
    under pytest-xdist the controller starts them and a worker waits. Returns each process
    with the thread that writes its status.
    """
    cmd = pytest_command(["-q", "-x", "-k", CI_SUBSET])
    runs = []
    for names in dict.fromkeys(sanitizers):
        stem = _stem(folder, names)
        try:
            env = {**environment(parse(names)), "IBP_GRAPH_TEST_CASES": str(CI_CASES)}
        except SanitizerUnavailable as exc:
            _write(stem.with_suffix(".skip"), str(exc))
            continue
        with stem.with_suffix(".log").open("w") as out:
            proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

        def note_status(proc: subprocess.Popen = proc, stem: Path = stem) -> None:
            _write(stem.with_suffix(".status"), str(proc.wait()))

        noting = threading.Thread(target=note_status, daemon=True)
        noting.start()
        runs.append((proc, noting))
    return runs


def ci_run_result(names: str, folder: Path, timeout: float) -> tuple[int, str] | str:
    """Wait for the run of ``names`` that `start_ci_runs` started in ``folder``.

    Returns its exit status and output, or why it could not run here (a string).

    Raises:
        TimeoutError: it has not ended (or not been started) within ``timeout`` seconds.
    """
    stem = _stem(folder, names)
    status, skip = stem.with_suffix(".status"), stem.with_suffix(".skip")
    deadline = time.monotonic() + timeout
    while not status.exists():
        if skip.exists():
            return skip.read_text()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the host kernel tests under {names} took over {timeout:g} s")
        time.sleep(0.5)
    return int(status.read_text()), stem.with_suffix(".log").read_text(errors="replace")


def stop_runs(runs: list[tuple[subprocess.Popen, threading.Thread]]) -> None:
    """Kill the runs of `start_ci_runs` still under way, and wait until every status is written
    (so that the caller may then remove their folder)."""
    for proc, noting in runs:
        if proc.poll() is None:
            proc.kill()
        noting.join()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split(".. code-block:: text")[1].split("builds")[0].strip("\n"))
        return 0 if argv else 2
    try:
        names = parse(argv[0])
        env = environment(names)
    except (ValueError, SanitizerUnavailable) as exc:
        print(exc, file=sys.stderr)
        return 2
    cmd = pytest_command(argv[1:])
    print(f"sanitize: {','.join(names)}: {' '.join(cmd[1:])}", flush=True)
    return subprocess.run(cmd, env=env, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
