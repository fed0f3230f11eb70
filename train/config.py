"""Training run configs: a `TrainConfig` dataclass read from YAML, with ``--set`` overrides.

A config is a flat YAML mapping of `TrainConfig` fields (``configs/*.yaml``, shipped as
``ibp_graph/configs``). `load_config` reads it with ``yaml.safe_load``, rejects unknown keys
(naming them and listing the valid ones), applies ``key=value`` overrides parsed by the
field's type, and checks every value:

.. code-block:: python

    from ibp_graph.train.config import load_config

    cfg = load_config("cora-sage", ["epochs=5", "fanouts=[15,10]", "ibp=false"])
    cfg = load_config("cora-sage", ["backend=dgl"])  # DGL models and loader
    cfg = load_config("configs/ogbn-products-sage.yaml", ["root=/data/ogb"])

A bare name (``cora-sage``) or ``configs/NAME.yaml`` that is not a file here resolves to the
packaged config of that name.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Union

import yaml

from ibp_graph.errors import IBPInputError, check_choice
from ibp_graph.loading import GRAPH_MEMORY
from ibp_graph.sampler import BACKENDS as SAMPLER_BACKENDS

__all__ = [
    "ConfigError",
    "TrainConfig",
    "check_device_keys",
    "default_workdir",
    "load_config",
    "packaged_configs",
    "parse_override",
    "resolve_config",
]

_ALIGNS = (1, 2, 4, 8, 16, 32)
_MODELS = ("sage", "gat")
_BACKENDS = ("pyg", "dgl")
_DIST_BACKENDS = ("auto", "gloo", "nccl")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


class ConfigError(IBPInputError):
    """A bad config: unreadable file, unknown key, wrong type or value, bad override.

    The message names the file or ``--set`` item and the key.
    """


@dataclass
class TrainConfig:
    """One training run: dataset, model, sampling, optimiser and the IBP feature table.

    Attributes:
        dataset: a name `ibp_graph.datasets.load_dataset` knows (``cora``, ``citeseer``,
            ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``).
        root: folder of the dataset (OGB: the folder holding ``ogbn_products/``; default:
            None, the loader's default).
        model: ``sage`` (GraphSAGE, mean aggregation) or ``gat``.
        backend: ``pyg`` (PyG models and `ibp_graph.loaders.pyg.NeighborLoader`) or ``dgl``
            (DGL models and `ibp_graph.loaders.dgl.DataLoader`; needs the ``dgl`` extra and,
            with the PyPI DGL build, the CPU).
        hidden: hidden width (GAT: a multiple of ``heads``).
        layers: message-passing layers; as many as ``fanouts`` has hops.
        dropout: dropout probability, in [0, 1).
        heads: GAT attention heads (ignored by ``sage``).
        fanouts: neighbors sampled per node and hop during training, ``-1`` for all.
        eval_fanouts: neighbors per hop when evaluating; None: the full neighborhood
            (``-1`` per hop).
        batch_size: seed nodes per training batch.
        epochs: training epochs; valid and test accuracy are measured after each.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        ibp: read node features from an IBP-compressed table (True) or from the raw tensor
            (False).
        clusters: most mask clusters of the compressed table (1..255).
        align: row alignment of the compressed table: ``auto`` or 1, 2, 4, 8, 16, 32.
        undirected: add every reverse edge before training (as PyG's OGB examples do for
            the directed citation graphs).
        device: ``auto`` (cuda if available, else cpu), ``cpu``, ``cuda`` or ``cuda:N``.
        graph_memory: where the loaders keep the graph on a GPU: ``device`` (copied to the
            GPU) or ``uva`` (pinned host memory read over UVA, for graphs larger than the GPU).
        sampler_backend: how neighbors are drawn: ``auto`` (the loaders decide: the fused
            hop kernels on a GPU when CuPy imports, else torch ops;
            `ibp_graph.loading.default_sampler_backend`), ``torch`` (torch ops) or
            ``kernel`` (the fused hop kernels; GPU runs only).
        sampler_cuda_graph: replay the fused hop kernels' launches from CUDA graphs:
            ``auto`` (the loaders decide: on with the kernels,
            `ibp_graph.loading.default_cuda_graph`), ``true`` (the kernels only) or ``false``.
        sample_group: batches per sampler call: ``auto`` (the loaders decide: 8 where the
            kernels launch a batch without reading its sizes, else 1,
            `ibp_graph.loading.default_sample_group`) or an integer >= 1.
        seed: seed of the model initialisation, dropout, shuffling and sampling.
        prefetch: batches the loader prepares ahead.
        eval_batch_size: seed nodes per evaluation batch.
        workdir: where the compressed table is written and reused (default: None,
            `default_workdir`).
        progress: show progress bars.
        dist_backend: process-group backend of a data-parallel run (started by ``torchrun``
            or ``ibp-graph train --nproc-per-node N``): ``auto`` (NCCL when every local rank
            has a GPU of its own, else gloo), ``gloo`` or ``nccl``. Ignored in a single
            process.
        dist_timeout: seconds a rank waits for the others in a collective before it stops
            with an error (a rank that died, a hung host). The ranks also wait this long
            while local rank 0 compresses the table on a first run: raise it for a large
            table, or compress it beforehand.
    """

    dataset: str
    root: str | None = None
    model: str = "sage"
    backend: str = "pyg"
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    heads: int = 1
    fanouts: list[int] = field(default_factory=lambda: [10, 10])
    eval_fanouts: list[int] | None = None
    batch_size: int = 64
    epochs: int = 20
    lr: float = 0.01
    weight_decay: float = 0.0
    ibp: bool = True
    clusters: int = 1
    align: int | str = "auto"
    undirected: bool = False
    device: str = "auto"
    graph_memory: str = "device"
    sampler_backend: str = "auto"
    sampler_cuda_graph: bool | str = "auto"
    sample_group: int | str = "auto"
    seed: int = 0
    prefetch: int = 2
    eval_batch_size: int = 1024
    workdir: str | None = None
    progress: bool = False
    dist_backend: str = "auto"
    dist_timeout: float = 300.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, coerce(f.name, getattr(self, f.name)))
        _check(self)

    @classmethod
    def keys(cls) -> list[str]:
        """Every valid key, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (lists copied)."""
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        """The config as YAML, one key per line in declaration order (lists inline)."""
        lines = []
        for key, value in self.to_dict().items():
            text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip()
            lines.append(f"{key}: {text.removesuffix('...').strip()}")
        return "\n".join(lines) + "\n"


# -- types ------------------------------------------------------------------------------------
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(TrainConfig)


def _options(tp: Any) -> tuple[Any, ...]:
    """The members of a union type, or ``(tp,)``."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _type_name(tp: Any) -> str:
    names = []
    for opt in _options(tp):
        if opt is type(None):
            names.append("null")
        elif typing.get_origin(opt) is list:
            names.append("a list of integers like [10, 5]")
        elif opt is str and tp in (int | str, bool | str):
            names.append("'auto'")
        else:
            names.append(
                {int: "an integer", float: "a number", bool: "true/false"}.get(opt, "a string")
            )
    return " or ".join(names)


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
        return int(value)
    return None


def _as_one(tp: Any, value: Any) -> tuple[bool, Any]:
    """``(True, converted)`` when ``value`` is of (or converts exactly to) type ``tp``."""
    if tp is type(None):
        ok = value is None or (
            isinstance(value, str) and value.strip().lower() in ("null", "none", "~")
        )
        return ok, None
    if tp is bool:
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return True, value.strip().lower() in _TRUE
        return False, None
    if tp is int:
        n = _as_int(value)
        return n is not None, n
    if tp is float:
        if isinstance(value, bool):
            return False, None
        if isinstance(value, (int, float)):
            return True, float(value)
        if isinstance(value, str):
            try:
                return True, float(value)  # YAML reads 1e-3 (no dot) as a string
            except ValueError:
                return False, None
        return False, None
    if tp is str:
        return isinstance(value, str), value
    if typing.get_origin(tp) is list:
        if isinstance(value, str):
            text = value.strip().removeprefix("[").removesuffix("]")
            value = [v for v in re.split(r"[,\s]+", text) if v]
        if not isinstance(value, (list, tuple)):
            return False, None
        items = [_as_int(v) for v in value]
        return all(i is not None for i in items), items
    raise AssertionError(f"unhandled field type {tp!r}")  # pragma: no cover


def coerce(key: str, value: Any) -> Any:
    """``value`` converted to the type of field ``key`` (an exact conversion or none).

    Strings are accepted where they spell the type exactly (``"10"``, ``"1e-3"``, ``"true"``,
    ``"[10, 5]"``, ``"null"``); a float with a fraction never becomes an int.

    Raises:
        ConfigError: an unknown key, or a value of the wrong type (naming the key, the
            expected type and the value).
    """
    types_ = _field_types()
    if key not in types_:
        raise ConfigError(_unknown(key))
    tp = types_[key]
    opts = _options(tp)
    # Try None first, then the other members; 'auto' for align before int.
    for opt in sorted(opts, key=lambda o: o is not type(None)):
        ok, out = _as_one(opt, value)
        if ok:
            return out
    raise ConfigError(f"{key} must be {_type_name(tp)}, got {_show(value)}")


def _unknown(key: str) -> str:
    valid = TrainConfig.keys()
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key {key!r}{hint}; valid keys: {', '.join(valid)}"


# -- values -----------------------------------------------------------------------------------
def _check(cfg: TrainConfig) -> None:
    """Check ranges, choices and the fields that depend on each other."""
    from ibp_graph.datasets import known_names

    def bad(key: str, what: str) -> ConfigError:
        return ConfigError(f"{key} must be {what}, got {getattr(cfg, key)!r}")

    def choice(key: str, allowed: tuple[str, ...]) -> None:
        try:
            check_choice(key, getattr(cfg, key), allowed)
        except IBPInputError as exc:
            raise ConfigError(str(exc)) from None

    names = known_names()
    if cfg.dataset.strip().lower() not in [n.lower() for n in names]:
        raise ConfigError(f"unknown dataset {cfg.dataset!r}; known: {', '.join(names)}")
    choice("model", _MODELS)
    choice("backend", _BACKENDS)
    choice("graph_memory", GRAPH_MEMORY)
    choice("sampler_backend", ("auto", *SAMPLER_BACKENDS))
    for key in ("sampler_cuda_graph", "sample_group"):
        if isinstance(getattr(cfg, key), str):
            setattr(cfg, key, getattr(cfg, key).strip().lower())
    if cfg.sampler_cuda_graph not in ("auto", True, False):
        raise bad("sampler_cuda_graph", "auto, true or false")
    if cfg.sample_group != "auto" and (isinstance(cfg.sample_group, str) or cfg.sample_group < 1):
        raise bad("sample_group", "auto or an integer >= 1")
    if cfg.sampler_cuda_graph is True and cfg.sampler_backend == "torch":
        raise ConfigError(
            "sampler_cuda_graph: true replays the fused hop kernels' launches, but "
            "sampler_backend is torch; use sampler_backend: kernel (or auto), or "
            "sampler_cuda_graph: auto"
        )
    for key in ("hidden", "layers", "heads", "batch_size", "epochs", "eval_batch_size"):
        if getattr(cfg, key) < 1:
            raise bad(key, "an integer >= 1")
    for key in ("seed", "prefetch"):
        if getattr(cfg, key) < 0:
            raise bad(key, "an integer >= 0")
    if not 0.0 <= cfg.dropout < 1.0:
        raise bad("dropout", "in [0, 1)")
    if not cfg.lr > 0.0:
        raise bad("lr", "> 0")
    if not cfg.weight_decay >= 0.0:
        raise bad("weight_decay", ">= 0")
    if not 1 <= cfg.clusters <= 255:
        raise bad("clusters", "an integer in 1..255")
    if isinstance(cfg.align, str):
        cfg.align = cfg.align.strip().lower()
    if cfg.align != "auto" and cfg.align not in _ALIGNS:
        raise bad("align", f"'auto' or one of {', '.join(map(str, _ALIGNS))}")
    if not _DEVICE.match(cfg.device):
        raise bad("device", "auto, cpu, cuda or cuda:N")
    choice("dist_backend", _DIST_BACKENDS)
    if not cfg.dist_timeout > 0.0:
        raise bad("dist_timeout", "> 0 seconds")
    if cfg.model == "gat" and cfg.hidden % cfg.heads:
        raise ConfigError(
            f"hidden ({cfg.hidden}) must be a multiple of heads ({cfg.heads}) for gat"
        )
    for key in ("fanouts", "eval_fanouts"):
        hops = getattr(cfg, key)
        if hops is None:
            continue
        if len(hops) != cfg.layers:
            raise ConfigError(
                f"{key} has {len(hops)} hops ({hops}) but layers is {cfg.layers}: give one "
                "fanout per layer"
            )
        if any(k == 0 or k < -1 for k in hops):
            raise bad(key, "positive integers or -1 (all neighbors)")


def check_device_keys(cfg: TrainConfig, device: Any) -> None:
    """Check the keys that need a GPU against the run's resolved ``device`` (a ``torch.device``).

    Raises:
        ConfigError: ``sampler_backend: kernel`` or ``sampler_cuda_graph: true`` (the fused
            hop kernels run on CUDA only) or ``graph_memory: uva`` (a graph in pinned host
            memory, read by a GPU) with a device that is not a GPU.
    """
    if device.type == "cuda":
        return
    given = "" if cfg.device == str(device) else f" (device: {cfg.device})"
    gpu = "or device: cuda on a machine with a GPU"
    if cfg.sampler_backend == "kernel":
        raise ConfigError(
            f"sampler_backend: kernel runs the fused hop kernels on a GPU, but this run's device "
            f"is {device}{given}; use sampler_backend: torch (or auto: torch ops off the GPU), "
            + gpu
        )
    if cfg.sampler_cuda_graph is True:
        raise ConfigError(
            "sampler_cuda_graph: true replays the fused hop kernels' launches on a GPU, but "
            f"this run's device is {device}{given}; use sampler_cuda_graph: auto, " + gpu
        )
    if cfg.graph_memory == "uva":
        raise ConfigError(
            "graph_memory: uva keeps the graph in pinned host memory for a GPU to read, but "
            f"this run's device is {device}{given}; use graph_memory: device, " + gpu
        )


# -- files and overrides ----------------------------------------------------------------------
def packaged_configs() -> list[str]:
    """Names of the configs shipped in ``ibp_graph/configs`` (``cora-sage``, ...)."""
    folder = resources.files("ibp_graph.configs")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def resolve_config(spec: str | os.PathLike[str]) -> tuple[str, str]:
    """``(where, text)`` of a config: a YAML file, or a packaged config by name.

    ``spec`` is a path to a file; when no such file exists and it is a bare name
    (``cora-sage``, ``cora-sage.yaml``) or ``configs/NAME.yaml``, the packaged config
    ``NAME`` is used. ``where`` names it in messages: the path, or ``the packaged config
    NAME`` (the package's file is no path the user has).

    Raises:
        ConfigError: neither a readable file nor a packaged config (listing those).
    """
    path = Path(spec)
    if path.is_file():
        try:
            return str(path), path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read the config ({exc})") from None
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, not a config file")
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    known = packaged_configs()
    if path.parent.name in ("", "configs") and name in known:
        ref = resources.files("ibp_graph.configs") / f"{name}.yaml"
        return f"the packaged config {name}", ref.read_text(encoding="utf-8")
    raise ConfigError(
        f"{spec}: no such config file, and no packaged config of that name; packaged: "
        f"{', '.join(known)}"
    )


def parse_override(item: str) -> tuple[str, Any]:
    """``"key=value"`` as ``(key, value)``, the value converted to the field's type.

    Values are read as YAML (``[10, 5]``, ``true``, ``null``, ``0.01``), except for string
    fields, which take the text as it is.

    Raises:
        ConfigError: no ``=``, an unknown key, or a value of the wrong type.
    """
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. epochs=5 or fanouts=[10,5]")
    types_ = _field_types()
    if key not in types_:
        raise ConfigError(f"--set {item!r}: {_unknown(key)}")
    text = text.strip()
    if str in _options(types_[key]) and not (
        type(None) in _options(types_[key]) and text.lower() in ("null", "none", "~", "")
    ):
        value: Any = text
    else:
        try:
            value = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            value = text
    try:
        return key, coerce(key, value)
    except ConfigError as exc:
        raise ConfigError(f"--set {item!r}: {exc}") from None


def load_config(
    path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = ()
) -> TrainConfig:
    """Read a YAML config, apply ``key=value`` overrides in order, and check it.

    Args:
        path: a YAML file, or the name of a packaged config (see `resolve_config`).
        overrides: ``key=value`` items (``--set``), applied after the file, later ones
            winning.

    Returns:
        The checked config.

    Raises:
        ConfigError: an unreadable or malformed file, an unknown or missing key, a value of
            the wrong type or out of range (the message names the file or ``--set`` item and
            the key).
    """
    where, text = resolve_config(path)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{where}: not valid YAML ({detail})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a config is a mapping of keys to values, got {_show(raw)}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}: keys must be strings, got {_show(key)}")
        try:
            values[key] = coerce(key, value)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    for item in overrides:
        key, value = parse_override(item)
        values[key] = value
    if "dataset" not in values:
        raise ConfigError(f"{where}: missing required key 'dataset'")
    try:
        return TrainConfig(**values)
    except ConfigError as exc:
        source = f"{where} with --set {' '.join(overrides)}" if overrides else where
        raise ConfigError(f"{source}: {exc}") from None


def default_workdir() -> Path:
    """Where compressed tables go by default.

    ``$XDG_CACHE_HOME/ibp-graph``, or ``~/.cache/ibp-graph``, or ``./runs`` when no home
    folder is known.
    """
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home folder
            return Path("runs")
    return Path(base) / "ibp-graph"
