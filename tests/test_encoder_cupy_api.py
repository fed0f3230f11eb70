"""The encoder on a strict stand-in for CuPy 14: only what CuPy has, and NumPy's bytes.

``compress(device="cuda")`` runs the NumPy encoder of ``ibp_graph.codec`` through CuPy. No GPU
runs these tests, so a fake ``cupy`` (and ``cupyx``) module takes CuPy's place. It is built from
the installed CuPy's own names (``dir(cupy)``, ``dir(cupy.ndarray)``, each ufunc's loops, the
signatures of its functions and array methods) and computes with NumPy underneath. It refuses:

- a function, array attribute, ufunc method or keyword argument that CuPy 14 lacks;
- a ufunc call that CuPy would run in another dtype than NumPy (CuPy's loop lists are shorter);
- a host (NumPy) array anywhere but ``cupy.asarray`` / ``cupy.array``, even where CuPy would
  copy it to the device itself (an index, an assigned value): the encoder must not hide
  transfers;
- an implicit device-to-host conversion (``numpy.asarray`` of a device array);
- an array used while another device is current (CuPy raises, or reads over peer access);
- ``cupyx.scatter_add`` on a dtype CuPy's atomics lack, or with an index out of range (CuPy
  silently wraps it).

Sizes, raw flags and row bytes must then equal those of the NumPy encoder, and
``compress(device="cuda:1")`` must write the file ``compress(device="cpu")`` writes.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import make_table
from hypothesis import given, settings
from hypothesis import strategies as st

import ibp_graph
from ibp_graph.codec import ALIGNMENTS, CodecParams, best_clusters, encode
from ibp_graph.errors import IBPInputError

compress_module = importlib.import_module("ibp_graph.compress")
cupy_real = pytest.importorskip("cupy")  # imported for its names only: nothing runs on it

# --------------------------------------------------------------------------------------------
# The fake CuPy
# --------------------------------------------------------------------------------------------

MODULE_NAMES = frozenset(dir(cupy_real))
ARRAY_NAMES = frozenset(dir(cupy_real.ndarray))
UFUNC_TYPE = type(cupy_real.add)
#: Array methods that make views or copy to the host: no kernel, so no current-device check.
NO_KERNEL_METHODS = frozenset({"reshape", "view", "ravel", "transpose", "squeeze", "swapaxes"})
HOST_METHODS = frozenset({"get", "item", "tolist", "tobytes"})
#: dtypes ``cupyx.scatter_add`` (CUDA atomicAdd) takes.
SCATTER_ADD_TYPES = (np.int32, np.float16, np.float32, np.float64, np.uint32, np.uint64)


def _doc_signature(obj: Any) -> inspect.Signature | None:
    """The signature of a CuPy callable: Python's, or the one Cython writes atop the doc."""
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        pass
    first = (getattr(obj, "__doc__", None) or "").split("\n", 1)[0]
    found = re.match(r"^[\w.]*?\w+\((.*)\)(?: -> .*)?$", first)
    if found is None:
        return None
    space: dict[str, Any] = {}
    try:
        exec(f"def f({found.group(1)}): pass", {}, space)
    except (SyntaxError, NameError):
        return None
    return inspect.signature(space["f"])


class Devices:
    """The fake machine: how many devices, which one is current."""

    count = 2
    current = 0


class FakeDevice:
    """``cupy.cuda.Device``: the current device, or a scope that makes ``index`` current."""

    def __init__(self, index: int | None = None):
        self.id = Devices.current if index is None else int(index)
        self._outer: list[int] = []

    def __enter__(self) -> FakeDevice:
        if not 0 <= self.id < Devices.count:
            raise RuntimeError("cudaErrorInvalidDevice: invalid device ordinal")
        self._outer.append(Devices.current)
        Devices.current = self.id
        return self

    def __exit__(self, *exc: object) -> None:
        Devices.current = self._outer.pop()


def _on_current_device(a: FakeArray, what: str) -> None:
    if a._dev != Devices.current:
        raise ValueError(
            f"{what}: the device where the array resides ({a._dev}) is different from the "
            f"current device ({Devices.current})"
        )


def _unwrap(x: Any, what: str) -> Any:
    """The NumPy array behind a device array; host arrays are refused."""
    if isinstance(x, FakeArray):
        _on_current_device(x, what)
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"{what}: a host numpy.ndarray where CuPy needs a device array")
    if isinstance(x, (tuple, list)):
        return type(x)(_unwrap(i, what) for i in x)
    if isinstance(x, dict):
        return {k: _unwrap(v, what) for k, v in x.items()}
    return x


def _wrap(x: Any, device: int | None = None) -> Any:
    """Device arrays of NumPy results (CuPy returns 0-d arrays, not scalars)."""
    if isinstance(x, np.ndarray):
        return FakeArray(x, device)
    if isinstance(x, np.generic):
        return FakeArray(np.asarray(x), device)
    if isinstance(x, (tuple, list)):
        return type(x)(_wrap(i, device) for i in x)
    return x


def _weak(x: Any) -> Any:
    """What a ufunc operand weighs in type resolution (Python scalars are weak)."""
    if isinstance(x, FakeArray):
        return x._a.dtype
    if isinstance(x, bool):
        return np.dtype(bool)
    if isinstance(x, (int, float, complex)):
        return type(x)
    return np.asarray(x).dtype


class FakeUfunc:
    """A CuPy ufunc: its loops, keyword arguments and methods, computed by NumPy's."""

    def __init__(self, name: str):
        self.name = name
        self._np = getattr(np, name)
        self._cp = getattr(cupy_real, name)
        self._loops: list[tuple[tuple[np.dtype, ...], tuple[np.dtype, ...]]] = []
        for t in self._cp.types:
            ins, outs = t.split("->")
            with contextlib.suppress(TypeError):
                self._loops.append((tuple(map(np.dtype, ins)), tuple(map(np.dtype, outs))))

    def _check_loop(self, args: tuple) -> None:
        """CuPy takes the first loop every input casts to safely; its output must be NumPy's."""
        nin, nout = self._np.nin, self._np.nout
        try:
            want = self._np.resolve_dtypes(tuple(_weak(a) for a in args[:nin]) + (None,) * nout)
        except (TypeError, ValueError):
            return  # NumPy raises as well
        ins, outs = want[:nin], want[nin:]
        for loop_in, loop_out in self._loops:
            if all(np.can_cast(a, b, "safe") for a, b in zip(ins, loop_in, strict=True)):
                if loop_out != tuple(outs):
                    raise TypeError(f"cupy.{self.name}{ins} gives {loop_out}, NumPy {outs}")
                return
        raise TypeError(f"cupy.{self.name} has no loop for {ins}")

    def __call__(self, *args: Any, out: Any = None, dtype: Any = None, casting: Any = None):
        what = f"cupy.{self.name}"
        if len(args) != self._np.nin:
            raise TypeError(f"{what}: pass outputs as out=")
        self._check_loop(args)
        kw: dict[str, Any] = {}
        if out is not None:
            kw["out"] = _unwrap(out, what)
        if dtype is not None:
            kw["dtype"] = dtype
        if casting is not None:
            kw["casting"] = casting
        res = self._np(*_unwrap(args, what), **kw)
        return out if out is not None else _wrap(res)

    def reduce(self, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None, keepdims=False):
        if self.name != "add":  # CuPy: add and multiply only (the fake: add)
            raise NotImplementedError(f"cupy.{self.name}.reduce")
        return array.sum(axis, dtype, out, keepdims)

    def accumulate(self, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None):
        if self.name != "add":
            raise NotImplementedError(f"cupy.{self.name}.accumulate")
        return array.cumsum(axis, dtype, out)

    def reduceat(self, *args: Any, **kwargs: Any):
        raise NotImplementedError(f"cupy.{self.name}.reduceat (CuPy has add.reduceat only)")

    def at(self, a: FakeArray, indices: Any, b: Any = None) -> None:
        if self._cp._scatter_op is None:
            raise NotImplementedError(f"cupy.{self.name}.at")
        if self.name != "add":
            raise NotImplementedError(f"the fake has only cupy.add.at, not cupy.{self.name}.at")
        fake_scatter_add(a, indices, b)


def fake_scatter_add(a: FakeArray, slices: Any, value: Any) -> None:
    """``cupyx.scatter_add``: atomic adds, so repeated indices accumulate."""
    what = "cupyx.scatter_add"
    if not isinstance(a, FakeArray):
        raise TypeError(f"{what}: a must be a device array")
    if not issubclass(a._a.dtype.type, SCATTER_ADD_TYPES):
        raise TypeError(f"{what} does not support {a._a.dtype}")
    target = _unwrap(a, what)
    index = _unwrap(slices, what)
    for i, ax in zip(index if isinstance(index, tuple) else (index,), target.shape, strict=False):
        if isinstance(i, np.ndarray) and i.size and (i.min() < -ax or i.max() >= ax):
            raise IndexError(f"{what}: index out of range (CuPy would wrap it silently)")
    np.add.at(target, index, np.asarray(_unwrap(value, what)).astype(target.dtype))


class FakeArray:
    """A CuPy array: a NumPy array on a device, with only the attributes CuPy 14 has."""

    __module__ = "cupy"  # what ibp_graph.codec.array_module looks at
    __array_priority__ = 100
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, a: np.ndarray, device: int | None = None):
        self._a = a
        self._dev = Devices.current if device is None else device

    # ---- attributes and methods -----------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in ARRAY_NAMES:
            raise AttributeError(f"cupy.ndarray has no attribute {name!r}")
        value = getattr(self._a, name)
        if not callable(value):
            return _wrap(value, self._dev) if isinstance(value, np.ndarray) else value
        sig = _doc_signature(getattr(cupy_real.ndarray, name))
        what = f"cupy.ndarray.{name}"

        def method(*args: Any, **kwargs: Any) -> Any:
            if sig is not None:
                sig.bind(self, *args, **kwargs)  # an argument CuPy's method lacks: TypeError
            if name not in NO_KERNEL_METHODS | HOST_METHODS:
                _on_current_device(self, what)
            res = value(*_unwrap(args, what), **_unwrap(kwargs, what))
            if name in HOST_METHODS:
                return res
            return _wrap(res, self._dev)

        return method

    def get(self, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True):
        """The explicit device-to-host copy."""
        if out is not None:
            raise TypeError("the fake takes no out= here")
        return np.array(self._a, order=order, copy=True)

    # ---- conversions ----------------------------------------------------------------------

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
            "construct a NumPy array explicitly."
        )

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if ufunc.__name__ not in MODULE_NAMES:
            return NotImplemented
        return getattr(getattr(FAKE_CUPY, ufunc.__name__), method)(*inputs, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func.__name__ not in MODULE_NAMES:
            return NotImplemented
        return getattr(FAKE_CUPY, func.__name__)(*args, **kwargs)

    def __bool__(self) -> bool:
        return bool(self._a)  # syncs on a GPU, but works for one element

    def __int__(self) -> int:
        return int(self._a)

    def __float__(self) -> float:
        return float(self._a)

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Iterator[FakeArray]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return f"fake_cupy.array({self._a!r}, device={self._dev})"

    # ---- indexing --------------------------------------------------------------------------

    @staticmethod
    def _index(key: Any, what: str) -> Any:
        items = key if isinstance(key, tuple) else (key,)
        for k in items:
            if isinstance(k, (np.ndarray, list)):
                raise TypeError(f"{what}: a host index array (a hidden host-to-device copy)")
        return _unwrap(key, what)

    def __getitem__(self, key: Any) -> FakeArray:
        return _wrap(self._a[self._index(key, "cupy.ndarray.__getitem__")], self._dev)

    def __setitem__(self, key: Any, value: Any) -> None:
        what = "cupy.ndarray.__setitem__"
        _on_current_device(self, what)
        self._a[self._index(key, what)] = _unwrap(value, what)


def _binary(ufunc: str) -> tuple[Any, Any, Any]:
    def op(self: FakeArray, other: Any) -> Any:
        return getattr(FAKE_CUPY, ufunc)(self, other)

    def rop(self: FakeArray, other: Any) -> Any:
        return getattr(FAKE_CUPY, ufunc)(other, self)

    def iop(self: FakeArray, other: Any) -> Any:
        return getattr(FAKE_CUPY, ufunc)(self, other, out=self)

    return op, rop, iop


for _op, _ufunc in {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "floordiv": "floor_divide",
    "truediv": "true_divide",
    "mod": "remainder",
    "pow": "power",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "lshift": "left_shift",
    "rshift": "right_shift",
}.items():
    _f, _r, _i = _binary(_ufunc)
    setattr(FakeArray, f"__{_op}__", _f)
    setattr(FakeArray, f"__r{_op}__", _r)
    setattr(FakeArray, f"__i{_op}__", _i)
for _op, _ufunc in {
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}.items():
    setattr(FakeArray, f"__{_op}__", _binary(_ufunc)[0])
for _op, _ufunc in {"neg": "negative", "invert": "invert", "abs": "absolute"}.items():
    setattr(FakeArray, f"__{_op}__", lambda self, _u=_ufunc: getattr(FAKE_CUPY, _u)(self))


class FakeFunction:
    """A CuPy function: CuPy's signature, NumPy's result, device arrays in and out."""

    def __init__(self, name: str):
        self.name = name
        self._sig = _doc_signature(getattr(cupy_real, name))
        self._np = getattr(np, name, None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        what = f"cupy.{self.name}"
        if self._sig is not None:
            self._sig.bind(*args, **kwargs)  # an argument CuPy's function lacks: TypeError
        if self.name in ("asarray", "array"):  # the explicit host-to-device copy
            return _to_device(*args, **kwargs)
        if self._np is None:
            raise NotImplementedError(f"the fake has no NumPy counterpart of {what}")
        return _wrap(self._np(*_unwrap(args, what), **_unwrap(kwargs, what)))


def _to_device(a: Any, dtype: Any = None, order: Any = None, *, copy: Any = None, **_: Any):
    if isinstance(a, FakeArray):
        if dtype is None or np.dtype(dtype) == a._a.dtype:
            return a  # no copy, wherever it lives
        return a.astype(dtype)
    return FakeArray(np.array(a, dtype=dtype, copy=True))


class FakeCupy(types.ModuleType):
    """``cupy``: CuPy 14's names only."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name not in MODULE_NAMES:
            raise AttributeError(f"CuPy 14 has no cupy.{name}")
        real = getattr(cupy_real, name)
        if real is getattr(np, name, None):  # dtypes, scalar types, constants
            return real
        if isinstance(real, UFUNC_TYPE):
            return FakeUfunc(name)
        if callable(real) and not isinstance(real, type):
            return FakeFunction(name)
        raise AttributeError(f"the fake does not emulate cupy.{name}")


FAKE_CUPY = FakeCupy("cupy")
FAKE_CUPY.ndarray = FakeArray
FAKE_CUPY.cuda = types.SimpleNamespace(
    Device=FakeDevice,
    runtime=types.SimpleNamespace(
        getDeviceCount=lambda: Devices.count, getDevice=lambda: Devices.current
    ),
)
FAKE_CUPYX = types.ModuleType("cupyx")
FAKE_CUPYX.scatter_add = fake_scatter_add


@contextlib.contextmanager
def fake_cupy() -> Iterator[types.ModuleType]:
    """``import cupy`` / ``import cupyx`` give the fakes, on a fresh two-device machine."""
    Devices.count, Devices.current = 2, 0
    saved = {name: sys.modules.get(name) for name in ("cupy", "cupyx")}
    sys.modules.update(cupy=FAKE_CUPY, cupyx=FAKE_CUPYX)
    try:
        yield FAKE_CUPY
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


# --------------------------------------------------------------------------------------------
# The fake itself refuses what CuPy refuses
# --------------------------------------------------------------------------------------------


def test_the_fake_is_strict() -> None:
    with fake_cupy() as cp:
        a = cp.arange(6, dtype=np.uint32)
        host = np.arange(6, dtype=np.uint32)
        with pytest.raises(TypeError, match="host"):
            _ = a + host
        with pytest.raises(TypeError, match="host"):
            _ = host + a
        with pytest.raises(TypeError, match="host"):
            cp.where(host > 2, a, a)
        with pytest.raises(TypeError, match="Implicit conversion"):
            np.asarray(a)
        with pytest.raises(TypeError, match="host index"):
            _ = a[np.array([0, 1])]
        with pytest.raises(TypeError, match="host"):
            a[:2] = host[:2]
        with pytest.raises(NotImplementedError):  # the CPU bit packer's NumPy-only call
            cp.bitwise_or.reduceat(a, cp.arange(2))
        with pytest.raises(TypeError):
            a.sum(where=a > 1)  # NumPy's keyword, not CuPy's
        with pytest.raises(TypeError, match="does not support"):
            FAKE_CUPYX.scatter_add(cp.zeros(3, dtype=np.int64), cp.arange(2), cp.arange(2))
        with pytest.raises(IndexError, match="wrap"):
            FAKE_CUPYX.scatter_add(cp.zeros(3, dtype=np.uint64), cp.arange(4), 1)
        missing = next(n for n in ("busday_count", "nditer", "frompyfunc") if n not in dir(cp))
        with pytest.raises(AttributeError):
            getattr(cp, missing)
        with cp.cuda.Device(1):
            with pytest.raises(ValueError, match="different from the current device"):
                _ = a + 1
            b = cp.asarray(host)
        assert b._dev == 1
        # What CuPy does, the fake does: a scalar from a reduction is a 0-d device array.
        total = a.sum()
        assert type(total) is FakeArray and total.shape == () and int(total) == 15
        assert array_module_name(a) == "cupy"
        counted = cp.zeros(3, dtype=np.uint64)
        FAKE_CUPYX.scatter_add(counted, cp.asarray(np.array([0, 0, 2])), cp.full(3, 5, np.uint64))
        assert counted.get().tolist() == [10, 0, 5]  # repeated indices accumulate


def array_module_name(x: Any) -> str:
    from ibp_graph.codec import array_module

    return array_module(x).__name__


# --------------------------------------------------------------------------------------------
# The encoder: the same bytes through the fake as through NumPy
# --------------------------------------------------------------------------------------------


def _params(
    rng: np.random.Generator, word_bytes: int, k: int, v: int, max_b: int, mask_kind: str
) -> CodecParams:
    wd = np.dtype(f"<u{word_bytes}")
    top = int(np.iinfo(wd).max)
    if mask_kind == "lut":  # one run of at most 12 bits per column: the lookup-table match
        lo = rng.integers(0, word_bytes * 8 - 12, (k, v))
        width = rng.integers(1, 13, (k, v))
        masks = (((1 << width) - 1) << lo).astype(wd)
    elif mask_kind == "random":
        masks = rng.integers(0, top, size=(k, v), dtype=wd, endpoint=True)
    elif mask_kind == "full":
        masks = np.full((k, v), top, dtype=wd)
    else:
        masks = np.zeros((k, v), dtype=wd)
    code_bits = rng.integers(1, max_b, size=(k, v), endpoint=True).astype(np.uint8)
    code_bits.flat[0] = max_b
    e = (1 << max_b) - 1
    bitvals = rng.integers(0, top, size=(k, v, e), dtype=wd, endpoint=True) & masks[:, :, None]
    bitvals[np.arange(e) >= ((1 << code_bits.astype(np.int64)) - 1)[:, :, None]] = 0
    return CodecParams(word_bytes=word_bytes, masks=masks, code_bits=code_bits, bitvals=bitvals)


def _words(rng: np.random.Generator, params: CodecParams, n: int, hit: float) -> np.ndarray:
    """Words that mostly match a dictionary entry of a random cluster (some do not)."""
    k, v, e = params.bitvals.shape
    wd = params.word_dtype
    top = int(np.iinfo(wd).max)
    words = rng.integers(0, top, size=(n, v), dtype=wd, endpoint=True)
    cl = rng.integers(0, k, n)
    pick = rng.integers(0, e, (n, v))
    chosen = params.bitvals[cl[:, None], np.arange(v)[None, :], pick]
    matched = (words & ~params.masks[cl]) | chosen
    sparse = rng.random((n, v)) < 0.9  # long runs of code-0 words: the grouped form
    matched = np.where(sparse, params.bitvals[cl, :, 0] | (words & ~params.masks[cl]), matched)
    return np.where(rng.random((n, 1)) < hit, matched, words)


def _same_encoding(words: np.ndarray, params: CodecParams, align: int, clusters: bool) -> None:
    cl_np = best_clusters(words, params)[0] if clusters else None
    want = encode(words, params, align, cl_np)
    with fake_cupy() as cp:
        dev_words = cp.asarray(words)
        cl_dev, bits_dev = best_clusters(dev_words, params)
        cl_fake = cl_dev if clusters else None
        got = encode(dev_words, params, align, cl_fake)
        assert type(got.data) is FakeArray and type(got.sizes) is FakeArray
        assert np.array_equal(got.sizes.get(), want.sizes)
        assert np.array_equal(got.raw.get(), want.raw)
        assert got.data.get().tobytes() == want.data.tobytes()
        cl_cpu, bits_cpu = best_clusters(words, params)
        assert np.array_equal(cl_dev.get(), cl_cpu)
        assert np.array_equal(bits_dev.get(), bits_cpu)


def _match_path(params: CodecParams) -> str:
    """Which of the three code matches of ``codec._codes`` the parameters take."""
    if params.field_lut is not None and params.max_entries > 3:
        return "lookup"
    if params.max_entries <= 15 or params.word_bytes == 8:
        return "compare"
    return "search"


@pytest.mark.parametrize(
    ("word_bytes", "max_b", "mask_kind", "path"),
    [
        (4, 3, "random", "compare"),  # <= 15 entries: broadcast compare
        (4, 6, "random", "search"),  # > 15 entries of 4-byte words: sorted keys
        (4, 5, "lut", "lookup"),  # every mask one run of <= 12 bits: lookup table
        (8, 4, "random", "compare"),  # 8-byte words always compare
        (8, 4, "lut", "lookup"),
        (4, 2, "full", "compare"),
        (4, 8, "zero", "search"),
    ],
)
@pytest.mark.parametrize("k", [1, 3])
def test_each_match_path_gives_numpy_bytes(
    word_bytes: int, max_b: int, mask_kind: str, path: str, k: int
) -> None:
    rng = np.random.default_rng(word_bytes * 100 + max_b * 10 + k)
    params = _params(rng, word_bytes, k, 70, max_b, mask_kind)
    assert _match_path(params) == path
    words = _words(rng, params, 120, hit=0.8)
    for align in (1, 16):
        _same_encoding(words, params, align, clusters=k > 1)


@settings(max_examples=40)
@given(
    word_bytes=st.sampled_from([4, 8]),
    k=st.integers(1, 4),
    v=st.integers(1, 80),
    n=st.integers(1, 50),
    max_b=st.integers(1, 8),
    mask_kind=st.sampled_from(["lut", "random", "full", "zero"]),
    hit=st.sampled_from([0.0, 0.5, 1.0]),
    align=st.sampled_from(ALIGNMENTS),
    seed=st.integers(0, 2**32 - 1),
)
def test_encode_through_cupy_api_matches_numpy(
    word_bytes: int,
    k: int,
    v: int,
    n: int,
    max_b: int,
    mask_kind: str,
    hit: float,
    align: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    if word_bytes == 8:
        max_b = min(max_b, 4)
    params = _params(rng, word_bytes, k, v, max_b, mask_kind)
    _same_encoding(_words(rng, params, n, hit), params, align, clusters=k > 1)


def test_host_cluster_ids_with_device_words() -> None:
    """A NumPy cluster array with device words goes to the device (it indexes device arrays)."""
    rng = np.random.default_rng(5)
    params = _params(rng, 4, 3, 40, 3, "random")
    words = _words(rng, params, 60, hit=0.7)
    cl = rng.integers(0, 3, 60).astype(np.uint8)
    want = encode(words, params, 16, cl)
    with fake_cupy() as cp:
        got = encode(cp.asarray(words), params, 16, cl)
        assert got.data.get().tobytes() == want.data.tobytes()


def test_parameters_follow_the_current_device() -> None:
    """The same parameters encode on device 0, then on device 1 (one cached copy each)."""
    rng = np.random.default_rng(6)
    params = _params(rng, 4, 2, 33, 5, "lut")
    words = _words(rng, params, 40, hit=0.9)
    want = encode(words, params, 8, best_clusters(words, params)[0])
    with fake_cupy() as cp:
        for index in (0, 1):
            with cp.cuda.Device(index):
                dev_words = cp.asarray(words)
                got = encode(dev_words, params, 8, best_clusters(dev_words, params)[0])
                assert got.data._dev == index
                assert got.data.get().tobytes() == want.data.tobytes()


# --------------------------------------------------------------------------------------------
# compress(device="cuda:N") writes the CPU's file
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    from ibp_graph.kernels import runtime

    with fake_cupy() as cp:
        monkeypatch.setattr(runtime, "cupy", lambda: cp)
        monkeypatch.setattr(runtime, "require_cuda", lambda what: None)
        yield cp


@pytest.mark.parametrize(
    ("name", "kind", "clusters", "word_bytes", "device"),
    [
        ("float32", "normal", 1, 4, "cuda:1"),
        ("float32", "mixed", 4, 4, "cuda:1"),  # 4 clusters kept, raw rows among encoded ones
        ("float16", "sparse", 2, 4, "cuda"),  # grouped rows; torch's current device (1)
        ("float64", "specials", 1, 8, "cuda:1"),
        ("uint8", "few", 3, 4, "cuda:1"),  # 6-bit codes
        ("bfloat16", "bits", 1, 4, "cuda:1"),  # every row raw
    ],
)
def test_compress_on_cuda_writes_the_cpu_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    kind: str,
    clusters: int,
    word_bytes: int,
    device: str,
) -> None:
    x = make_table(np.random.default_rng(11), name, 700, 37, kind)
    if name == "bfloat16":
        import torch

        data: Any = torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    else:
        data = x
    opts = {"clusters": clusters, "word_bytes": word_bytes, "progress": False}
    monkeypatch.setattr(compress_module, "ENCODE_BATCH_WORDS", 3000)  # many batches
    monkeypatch.setattr(compress_module, "GPU_ENCODE_BATCH_WORDS", 5000)  # other boundaries
    cpu = ibp_graph.compress(data, tmp_path / "cpu.ibp", device="cpu", **opts)
    cpu.close()
    with fake_gpu(monkeypatch):
        monkeypatch.setattr("torch.cuda.current_device", lambda: 1)
        gpu = ibp_graph.compress(data, tmp_path / "gpu.ibp", device=device, **opts)
        gpu.close()
        assert Devices.current == 0  # the scope is left
    assert (tmp_path / "gpu.ibp").read_bytes() == (tmp_path / "cpu.ibp").read_bytes()


def test_compress_on_a_missing_device_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = np.ones((10, 4), dtype=np.float32)
    with fake_gpu(monkeypatch), pytest.raises(IBPInputError, match="2 CUDA device"):
        ibp_graph.compress(x, tmp_path / "x.ibp", device="cuda:2")
