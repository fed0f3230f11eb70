"""What every benchmark result records: machine, versions, commit, date and command."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ibp_graph.cli._common import json_ready

RESULTS = Path(__file__).resolve().parent / "results"


def add_out(parser: argparse.ArgumentParser) -> None:
    """Add ``--out``, the folder a benchmark writes its results to: by default `RESULTS`, the
    committed results (pass a folder elsewhere for a trial run)."""
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="folder for the results (default: benchmarks/results/, the committed results)",
    )


def slug(device_name: str) -> str:
    """A file-name-safe form of a device name ("NVIDIA H100 80GB HBM3" -> nvidia-h100-...)."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "gpu"


def result_name(kind: str, device: torch.device) -> str:
    """A results file's name: ``<kind>-cpu``, or on a GPU ``<kind>-<its name>`` (e.g.
    ``e2e-nvidia-h100-80gb-hbm3``), so that the results of different GPUs sit side by side."""
    if device.type != "cuda":
        return f"{kind}-{device.type}"
    return f"{kind}-{slug(torch.cuda.get_device_name(device))}"


def block_warps_arg(text: str) -> int:
    """``--block-warps``: warps per block of a fetch, as the launchers take them (argparse
    type; `ibp_graph.kernels.runtime.check_block_warps`)."""
    from ibp_graph.kernels.runtime import check_block_warps

    try:
        return check_block_warps(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def block_label(warps: list[int] | None) -> str:
    """Fetch blocks' sizes for the results: ``blocks of N warps`` (None or empty: the
    library's default; several: each batch measured at each in turn)."""
    from ibp_graph.kernels.runtime import FETCH_BLOCK_WARPS

    if not warps:
        return f"blocks of {FETCH_BLOCK_WARPS} warps (the library's default)"
    if len(warps) == 1:
        return f"blocks of {warps[0]} warps"
    sizes = ", ".join(str(w) for w in warps[:-1]) + f" and {warps[-1]}"
    return f"blocks of {sizes} warps, each batch at each in turn on the same ids"


def blocks_per_sm(text: str) -> float:
    """``--max-blocks``: a fetch grid cap in blocks per SM, a positive number (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a positive number of blocks per SM (0.25: a block on a quarter of the "
            f"SMs), got {text!r}"
        )
    return value


def grid_cap(per_sm: float | None, device: torch.device) -> int | None:
    """A fetch grid cap of ``per_sm`` blocks per SM of ``device`` (at least one block; one SM
    off CUDA), or None (the library's default) for None."""
    if per_sm is None:
        return None
    sms = 1
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, round(per_sm * sms))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: Set by benchmarks/gpu_session.sh: the checkout's commit, for copies without a .git folder.
COMMIT_ENV = "IBP_GRAPH_COMMIT"


def _git_commit() -> str:
    given = os.environ.get(COMMIT_ENV, "").strip()
    if given:
        return given
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
            check=True,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_info() -> dict:
    """GPU name, driver and PCIe link of the current CUDA device (empty without one)."""
    if not torch.cuda.is_available():
        return {}
    info = {"gpu": torch.cuda.get_device_name(), "cuda": torch.version.cuda}
    query = "driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.splitlines()[torch.cuda.current_device()]
        driver, gen, gen_max, width = (v.strip() for v in out.split(","))
        info.update(driver=driver, pcie=f"gen {gen} (max {gen_max}) x{width}")
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        pass
    return info


def environment() -> dict:
    """Machine, software versions, git commit, UTC date and the exact command line."""
    return {
        **gpu_info(),
        "device": f"CPU: {_cpu_model()} ({os.cpu_count()} cores visible)",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "git_commit": _git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


#: JSON-ready: NaN and infinities become None (the CLI's own helper).
finite = json_ready


def write_json(name: str, payload: dict, out: Path = RESULTS) -> Path:
    """Write ``<out>/<name>.json`` (default: benchmarks/results) and return its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def write_json_md(name: str, payload: dict, render: Callable[[], str], out: Path = RESULTS) -> Path:
    """Write ``<out>/<name>.json`` (`write_json`), then the page ``render()`` gives as
    ``<out>/<name>.md``; return the page's path.

    The page is rendered after the JSON is written, so a page that fails to render loses
    nothing that was measured.
    """
    write_json(name, payload, out)
    path = out / f"{name}.md"
    path.write_text(render())
    return path


def header_lines(title: str, env: dict) -> list[str]:
    """The opening lines of a results page: title, device, date, commit and command."""
    gpu = []
    if env.get("gpu"):
        gpu.append(
            f"- GPU: {env['gpu']}, driver {env.get('driver', '?')}, PCIe {env.get('pcie', '?')}"
            f", CUDA {env.get('cuda', '?')}"
        )
    return [
        f"# {title}",
        "",
        *gpu,
        f"- device: {env['device']}",
        f"- date: {env['date']}, commit {env['git_commit']}",
        f"- command: `{env['command']}`",
        "",
    ]
