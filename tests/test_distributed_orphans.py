"""A rank stops by itself when its launcher is killed (ibp_graph/distributed/orphan.py).

A killed launcher's ranks are handed to init, whose exit statuses a test cannot read. Each
launcher therefore runs in a harness process (this file run as a script) that makes itself
the "subreaper" of what it starts (``PR_SET_CHILD_SUBREAPER``): the orphaned ranks become its
children, it reaps them and reports when and how each ended, and it kills whatever is left
by a deadline, so nothing outlives a test. The end-to-end tests also check that SIGTERM and
SIGINT to the launcher still stop the ranks through torch's agent, as before.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHM = Path("/dev/shm")
PR_SET_CHILD_SUBREAPER = 36

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not SHM.is_dir(),
    reason="needs Linux (a subreaper, /proc) and /dev/shm",
)

#: A stand-in for torch's elastic agent: starts ``argv[1:]`` as its one rank, then waits.
#: ``OURS=1`` passes its pid down as ``ibp-graph train --nproc-per-node`` does.
LAUNCHER = """
import os, subprocess, sys, time
if os.environ.get("OURS") == "1":
    os.environ["IBP_GRAPH_LAUNCHER_PID"] = str(os.getpid())
subprocess.Popen(sys.argv[1:])
time.sleep(300)
"""

#: A rank: watches its launcher, says so on stderr, then trains (sleeps). ``POLL=1`` hides
#: pidfds (the fallback of older kernels). ``ERROR=1``: the watch is slow, and once the
#: launcher is gone the rank meets an error of its own (as when another rank stopped first).
RANK = """
import os, sys, time
if os.environ.get("POLL") == "1" or os.environ.get("ERROR") == "1":
    del os.pidfd_open
from ibp_graph.distributed.orphan import watch_launcher
slow = os.environ.get("ERROR") == "1"
pid = watch_launcher(interval_s=600 if slow else 0.5)
sys.stderr.write(f"watching {pid}\\n")
sys.stderr.flush()
if slow:
    while os.getppid() == pid:
        time.sleep(0.05)
    from ibp_graph.cli.main import main
    sys.exit(main(["inspect", "/nonexistent/x.ibp"]))
time.sleep(120)
"""


def _env(run_id: str, **extra: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "IBP_"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        env.pop(key, None)
    env.update(IBP_GRAPH_RUN_ID=run_id, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _rank_env(run_id: str, **extra: object) -> dict[str, str]:
    """What torch's elastic agent sets in a rank (the ones the watch looks at)."""
    return _env(
        run_id,
        RANK=1,
        WORLD_SIZE=2,
        LOCAL_RANK=0,
        LOCAL_WORLD_SIZE=1,
        GROUP_RANK=1,
        TORCHELASTIC_RUN_ID="none",
        **extra,
    )


def _leftovers(run_id: str) -> list[str]:
    return sorted(p.name for p in SHM.glob(f"ibp-graph-{run_id}-*"))


def _remove(run_id: str) -> None:
    for path in SHM.glob(f"ibp-graph-{run_id}-*"):
        path.unlink(missing_ok=True)


# -- the harness ----------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """Pids of the live (not zombie) children of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.append(int(entry.name))
    return found


def _reap(pending: dict[int, None | dict], started: float, until: float) -> None:
    """Reap children until ``until``, noting when and how each pid in ``pending`` ended.

    Returns early once every pid of a non-empty ``pending`` has ended, or no child is left.
    """
    while time.monotonic() < until:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid in pending:
            code = os.waitstatus_to_exitcode(status)
            pending[pid] = {"code": code, "after_s": time.monotonic() - started}
        if pending and all(v is not None for v in pending.values()):
            return
        if pid == 0:
            time.sleep(0.05)


def harness(spec: dict) -> dict:
    """Start ``spec["cmd"]``, wait for its ranks, signal it, and see what its ranks do.

    Returns ``{"launcher": pid, "launcher_code": status, "ranks": {pid: ...}, "left": [pids],
    "error": None or what went wrong}``, each rank's entry being ``{"code", "after_s"}`` when
    it outlived the launcher and ended within ``spec["bound_s"]`` after the signal,
    ``"running"`` when it was still running then (and was killed here), ``"before"`` when it
    ended before the launcher (which reaped it).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return {"error": f"prctl: errno {ctypes.get_errno()}"}
    stderr = Path(spec["stderr"])
    with stderr.open("wb") as err:
        launcher = subprocess.Popen(
            spec["cmd"], env=spec["env"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err
        )
    report: dict = {"launcher": launcher.pid, "ranks": {}, "error": None}
    ranks: list[int] = []
    deadline = time.monotonic() + spec["ready_s"]
    while time.monotonic() < deadline and launcher.poll() is None:
        ranks = _children(launcher.pid)
        text = stderr.read_text(errors="replace")
        if len(ranks) == spec["ranks"] and text.count(spec["ready"]) >= spec["ready_count"]:
            break
        time.sleep(0.2)
    else:
        report["error"] = f"not ready (launcher exit {launcher.poll()}, ranks {ranks})"
    pending: dict[int, None | dict] = dict.fromkeys(ranks)
    started = time.monotonic()
    launcher.send_signal(spec.get("signal", signal.SIGKILL))
    try:
        report["launcher_code"] = launcher.wait(timeout=spec["bound_s"])
    except subprocess.TimeoutExpired:
        launcher.kill()
        report["launcher_code"] = f"still running {spec['bound_s']} s after the signal"
        launcher.wait()
    # The ranks it did not reap are this process's children now.
    _reap(pending, started, started + spec["bound_s"])
    mine = _children(os.getpid())
    for pid, seen in pending.items():
        if seen is None and pid in mine:  # still running (its pid cannot have been reused)
            pending[pid] = "running"
            os.kill(pid, signal.SIGKILL)
        elif seen is None:
            pending[pid] = "before"
    # Whatever else was adopted (loader workers, segment watchdogs) ends by itself, or here.
    _reap({}, started, time.monotonic() + 30)
    left = _children(os.getpid())
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    _reap({}, started, time.monotonic() + 5)
    report["ranks"] = {str(pid): seen for pid, seen in pending.items()}
    report["left"] = left
    return report


def _run_harness(tmp_path: Path, **spec: object) -> tuple[dict, str]:
    spec.setdefault("ready_count", 1)
    spec["stderr"] = str(tmp_path / "stderr.txt")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "report.json"
    limit = float(str(spec["ready_s"])) + float(str(spec["bound_s"])) + 120
    proc = subprocess.run(
        [sys.executable, __file__, str(tmp_path / "spec.json"), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=limit,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), Path(str(spec["stderr"])).read_text(errors="replace")


# -- which processes are watched ---------------------------------------------------------------
def test_only_ranks_of_torchs_elastic_agent_are_watched(monkeypatch) -> None:
    from ibp_graph.distributed import orphan

    agent = {"WORLD_SIZE": "2", "RANK": "0", "TORCHELASTIC_RUN_ID": "x"}
    assert orphan.launcher_pid({}) is None
    assert orphan.launcher_pid({"WORLD_SIZE": "2", "RANK": "0"}) is None  # a plain process
    assert orphan.launcher_pid({"TORCHELASTIC_RUN_ID": "x"}) is None  # not a rank
    assert orphan.launcher_pid(agent) == os.getppid()  # torchrun: the parent
    assert orphan.launcher_pid({**agent, orphan.LAUNCHER_PID_ENV: "4321"}) == 4321  # ours
    assert orphan.launcher_pid({**agent, orphan.LAUNCHER_PID_ENV: "x"}) == os.getppid()
    for key in ("TORCHELASTIC_RUN_ID", orphan.LAUNCHER_PID_ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert orphan.watch_launcher() is None  # nothing started
    assert not orphan.launcher_gone()
    orphan.stop_if_launcher_gone()  # returns
    with pytest.raises(ValueError, match="interval_s must be > 0, got 0"):
        orphan.watch_launcher(interval_s=0)
    monkeypatch.setattr(os, "name", "nt")
    assert orphan.launcher_pid(agent) is None


# -- the mechanism, with a stand-in launcher -----------------------------------------------------
@pytest.mark.parametrize(
    ("ours", "poll"),
    [(True, False), (False, False), (True, True)],
    ids=["our-launcher", "torchrun", "no-pidfd"],
)
def test_a_rank_stops_when_its_launcher_is_killed(tmp_path, ours, poll) -> None:
    run_id = f"t{secrets.token_hex(3)}"
    mine, other = (SHM / f"ibp-graph-{run_id}-node{n}-rows" for n in (1, 0))
    try:
        mine.write_bytes(b"x")
        other.write_bytes(b"x")  # another node's (two "hosts" on one machine)
        env = _rank_env(run_id, OURS=int(ours), POLL=int(poll))
        cmd = [sys.executable, "-c", LAUNCHER, sys.executable, "-c", RANK]
        report, err = _run_harness(
            tmp_path, cmd=cmd, env=env, ranks=1, ready="watching", ready_s=60, bound_s=10
        )
        assert report["error"] is None, (report, err)
        [seen] = report["ranks"].values()
        assert seen != "running", f"the rank outlived its launcher:\n{err}"
        assert seen["code"] == 1 and seen["after_s"] < 5, (seen, err)
        launcher = report["launcher"]
        assert f"watching {launcher}\n" in err
        line = f"ibp-graph: error: rank 1 of 2: the launcher (pid {launcher}) is gone; stopping\n"
        assert err.endswith(line), err
        # local rank 0 removed its node's segments of the run, and only those
        assert _leftovers(run_id) == [other.name]
    finally:
        _remove(run_id)


def test_an_error_after_the_launcher_is_gone_is_reported_as_that(tmp_path) -> None:
    run_id = f"t{secrets.token_hex(3)}"
    env = _rank_env(run_id, OURS=1, ERROR=1)
    cmd = [sys.executable, "-c", LAUNCHER, sys.executable, "-c", RANK]
    report, err = _run_harness(
        tmp_path, cmd=cmd, env=env, ranks=1, ready="watching", ready_s=60, bound_s=20
    )
    assert report["error"] is None, (report, err)
    [seen] = report["ranks"].values()
    assert isinstance(seen, dict) and seen["code"] == 1, (seen, err)
    assert "/nonexistent" not in err  # its own error is not what stopped the run
    assert err.endswith(f"the launcher (pid {report['launcher']}) is gone; stopping\n"), err


def test_a_rank_whose_launcher_is_already_gone_stops_at_once(tmp_path) -> None:
    # The launcher died before the watch started: the rank's parent is not the one named.
    run_id = f"t{secrets.token_hex(3)}"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    env = _rank_env(run_id, IBP_GRAPH_LAUNCHER_PID=gone.pid)
    proc = subprocess.run(
        [sys.executable, "-c", RANK], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc.stderr
    assert f"rank 1 of 2: the launcher (pid {gone.pid}) is gone; stopping" in proc.stderr


class _Model:
    """Stands for a DDP model, whose reducer holds the process group."""


def test_what_holds_the_group_is_kept_when_closed_on_the_way_out_of_ctrl_c() -> None:
    # Freeing it then can deadlock with gloo's worker thread (SIGINT from the launcher).
    import torch

    from ibp_graph.distributed import ddp

    ctx = ddp.DistContext(0, 2, 0, 2, 0, "gloo", torch.device("cpu"), "r", 20.0, False)
    model = _Model()
    ctx.hold(model)
    with pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        finally:
            ctx.close()
    assert not ctx.failed and any(kept is model for kept in ddp._KEPT_AFTER_FAILURE)
    ddp._KEPT_AFTER_FAILURE.remove(model)


# -- end to end: ibp-graph train --nproc-per-node 2, launcher killed ---------------------------
def _train(
    tmp_path: Path, run_id: str, how: signal.Signals, *, torchrun: bool = False
) -> tuple[dict, str]:
    """A 2-rank run on Cora, long enough; its launcher gets ``how`` after 2 epochs.

    The launcher is ``ibp-graph train --nproc-per-node 2``, or a user's ``torchrun``.
    """
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += ["--nproc-per-node=2", "--max-restarts=0", "-m", "ibp_graph"]
        cmd += ["train", "--config", "cora-sage"]
    else:
        cmd = [sys.executable, "-m", "ibp_graph", "train", "--config", "cora-sage"]
        cmd += ["--nproc-per-node", "2"]
    cmd += ["--set", "epochs=100000", "fanouts=[5,5]", "eval_fanouts=[5,5]", "batch_size=35"]
    cmd += ["device=cpu", f"workdir={tmp_path}"]
    return _run_harness(
        tmp_path,
        cmd=cmd,
        env=_env(run_id),
        ranks=2,
        ready="epoch   2/",
        ready_s=300,
        bound_s=30,
        signal=int(how),
    )


@pytest.mark.slow
@pytest.mark.parametrize("torchrun", [False, True], ids=["nproc-per-node", "torchrun"])
def test_ranks_of_a_killed_launcher_stop_and_leave_no_segments(tmp_path, torchrun) -> None:
    pytest.importorskip("torch_geometric")
    run_id = f"t{secrets.token_hex(3)}"
    try:
        report, err = _train(tmp_path, run_id, signal.SIGKILL, torchrun=torchrun)
        assert report["error"] is None, (report, err[-3000:])
        ranks = report["ranks"]
        assert len(ranks) == 2
        late = [pid for pid, seen in ranks.items() if seen == "running"]
        assert not late, f"ranks {late} still ran 30 s after the launcher was killed"
        assert all(seen["code"] == 1 for seen in ranks.values()), (ranks, err[-3000:])
        launcher = report["launcher"]
        for rank in (0, 1):
            line = f"ibp-graph: error: rank {rank} of 2: the launcher (pid {launcher}) is gone"
            assert line in err, err[-3000:]
        assert _leftovers(run_id) == []
        assert report["left"] == []
    finally:
        _remove(run_id)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "code", "said"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
    ids=["SIGTERM", "SIGINT"],
)
def test_sigterm_or_sigint_to_the_launcher_still_stops_the_ranks_first(
    tmp_path, how, code, said
) -> None:
    pytest.importorskip("torch_geometric")
    run_id = f"t{secrets.token_hex(3)}"
    try:
        report, err = _train(tmp_path, run_id, how)
        assert report["error"] is None, (report, err[-3000:])
        assert report["launcher_code"] == code, (report, err[-3000:])
        assert err.endswith(f"ibp-graph: {said}\n"), err[-3000:]
        # torch's agent stopped and reaped its ranks before it exited
        assert list(report["ranks"].values()) == ["before", "before"], report
        assert "is gone" not in err
        assert _leftovers(run_id) == []
        assert report["left"] == []
    finally:
        _remove(run_id)


if __name__ == "__main__":
    result = harness(json.loads(Path(sys.argv[1]).read_text()))
    Path(sys.argv[2]).write_text(json.dumps(result))
