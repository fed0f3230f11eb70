"""Compressing a table into an ``.ibp`` file: sample, fit, then encode in streamed chunks.

Both the fit and the encoding show a progress bar on stderr (see `compress`'s ``progress``).
"""

from __future__ import annotations

import contextlib
import numbers
import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .codec import ALIGNMENTS, best_clusters, encode, stored_sizes
from .container import IBPWriter, path_text, resolve_output
from .dtypes import as_table, rows_to_words, words_per_row
from .errors import IBPInputError, as_int, check_bool
from .preprocess import DEFAULT_SAMPLE_ROWS, SAMPLE_WORD_CAP, THRESHOLDS, fit, fit_work
from .progress import work_bar
from .sources import TableSource, open_source
from .table import IBPTable

#: Words encoded per batch on the CPU: small enough for the temporaries to stay in cache.
ENCODE_BATCH_WORDS = 1 << 17
#: Words encoded per batch on a GPU: large enough that launches and the few host syncs of a
#: batch are amortised (about 0.5 GiB of temporaries at 8-byte words).
GPU_ENCODE_BATCH_WORDS = 1 << 24
#: ``align="auto"`` takes the largest alignment (up to 16) costing at most this much space
#: over byte alignment, on the sample.
ALIGN_SLACK = 0.01
AUTO_ALIGNMENTS = (16, 8, 4, 2, 1)
#: Tables at least this large show a progress bar by default.
PROGRESS_MIN_BYTES = 64 << 20


def _shown(value: Any) -> str:
    """``value`` for a one-line message: the repr of a scalar or a string, else its type."""
    if value is None or isinstance(value, (bool, int, float, str, np.generic, torch.device)):
        return repr(value)
    return f"'{type(value).__name__}'"


class _Options(NamedTuple):
    clusters: int
    threshold: float | str
    word_bytes: int
    align: int | str
    sample: int | None
    seed: int


def _check_options(
    clusters: Any, threshold: Any, word_bytes: Any, align: Any, sample: Any, seed: Any
) -> _Options:
    """Check every option before any work; return them as plain Python values.

    The integer options take ints, NumPy integers and 0-d integer tensors or arrays (see
    `~ibp_graph.errors.as_int`); ``threshold`` takes ``"auto"`` or a real number (an int, a
    float or a NumPy number), not a bool or a tensor.
    """
    k = as_int(clusters)
    if k is None or not 1 <= k <= 255:
        got = _shown(clusters if k is None else k)
        raise IBPInputError(f"clusters must be an integer in 1..255, got {got}")
    t = as_int(word_bytes)
    if t not in (4, 8):
        got = _shown(word_bytes if t is None else t)
        raise IBPInputError(f"word_bytes must be 4 or 8, got {got}")
    a = align if isinstance(align, str) and align == "auto" else as_int(align)
    if a not in (*ALIGNMENTS, "auto"):
        got = _shown(align if a is None else a)
        raise IBPInputError(f"align must be 'auto' or one of {ALIGNMENTS}, got {got}")
    rows = None if sample is None else as_int(sample)
    if sample is not None and (rows is None or rows < 0):
        got = _shown(sample if rows is None else rows)
        raise IBPInputError(f"sample must be a row count >= 0 (0 = all rows), got {got}")
    s = as_int(seed)
    if s is None or s < 0:
        got = _shown(seed if s is None else s)
        raise IBPInputError(f"seed must be an integer >= 0, got {got}")
    if isinstance(threshold, str) and threshold == "auto":
        th: float | str = "auto"
    elif isinstance(threshold, numbers.Real) and not isinstance(threshold, (bool, np.bool_)):
        th = float(threshold)
        if not 0.5 < th <= 1.0:
            raise IBPInputError(f"threshold must be in (0.5, 1], got {th}")
    else:
        raise IBPInputError(f"threshold must be 'auto' or a number, got {_shown(threshold)}")
    return _Options(k, th, t, a, rows, s)


def check_device(device: Any) -> torch.device:
    """``device`` as a `torch.device` if it names the CPU or a CUDA device.

    Whether that GPU exists is not checked here.

    Raises:
        IBPInputError: it names anything else, e.g. ``"device must be 'cpu' or 'cuda[:N]',
            got 'tpu'"``.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise IBPInputError(f"device must be 'cpu' or 'cuda[:N]', got {_shown(device)}")
    return dev


def sample_ids(num_rows: int, num_words: int, sample: int | None, seed: int) -> np.ndarray:
    """Sorted row ids of the preprocessing sample (seeded; all rows if the table is small)."""
    if sample == 0:
        count = num_rows
    else:
        cap = max(1024, SAMPLE_WORD_CAP // num_words)
        count = min(num_rows, sample if sample is not None else min(DEFAULT_SAMPLE_ROWS, cap))
    if count >= num_rows:
        return np.arange(num_rows, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(num_rows, size=count, replace=False)).astype(np.int64)


def _identity(a: Any) -> Any:
    return a


def _encoder_device(device: str) -> tuple[Any, Any, AbstractContextManager[Any]]:
    """To-device and to-NumPy functions, and the scope every encoding step must run in.

    CuPy allocates and launches on its current device, so the parameters, the temporaries and
    the kernels of ``cuda:N`` follow the words onto device N only inside that scope.
    """
    dev = check_device(device)
    if dev.type == "cpu":
        return _identity, _identity, contextlib.nullcontext()
    from .kernels.runtime import cupy, device_index, require_cuda

    require_cuda("compress(device='cuda')")
    cp = cupy()
    index = device_index(dev)
    count = cp.cuda.runtime.getDeviceCount()
    if not 0 <= index < count:
        raise IBPInputError(f"device {device!r}: there are {count} CUDA device(s)")
    return cp.asarray, (lambda a: a.get()), cp.cuda.Device(index)


def choose_alignment(bits: np.ndarray, num_words: int, word_bytes: int) -> int:
    """The largest of 16, 8, 4, 2, 1 whose stored size is within `ALIGN_SLACK` of 1's."""
    tight = int(stored_sizes(bits, num_words, word_bytes, 1)[0].sum())
    for a in AUTO_ALIGNMENTS:
        if stored_sizes(bits, num_words, word_bytes, a)[0].sum() <= (1 + ALIGN_SLACK) * tight:
            return a
    return 1


def compress(
    data: Any,
    path: str | os.PathLike[str],
    *,
    clusters: int = 1,
    threshold: float | str = "auto",
    word_bytes: int = 4,
    sample: int | None = None,
    align: int | str = "auto",
    seed: int = 0,
    progress: bool | None = None,
    device: str = "cpu",
) -> IBPTable:
    """Compress a 2-D feature table losslessly into an ``.ibp`` file and open it.

    Example:
        >>> x = torch.randn(1000, 128)                              # doctest: +SKIP
        >>> table = ibp_graph.compress(x, "x.ibp", clusters=4)      # doctest: +SKIP
        >>> torch.equal(table[[3, 1, 3]], x[[3, 1, 3]])             # doctest: +SKIP
        True

    Args:
        data: a NumPy array or torch tensor of shape ``(rows, cols)`` (float32, float16,
            bfloat16, float64, int8..int64 or uint8), a path to a ``.npy`` / ``.pt`` file or
            ``ogb:NAME``, or a :class:`~ibp_graph.sources.TableSource` from
            :func:`~ibp_graph.sources.open_source`. Never modified.
        path: the ``.ibp`` file to write (a str, an ``os.PathLike`` or bytes); an existing
            regular file there is replaced atomically when done, anything else (a directory,
            a device, a FIFO) is refused, as is a path ending in a separator.
        clusters: the most mask clusters k; each row uses the one that stores it smallest,
            and a single cluster is kept when k do not pay for their own parameters
            (default: 1). This and the other integer options also take NumPy integers and
            0-d integer tensors or arrays.
        threshold: ``"auto"`` sweeps 0.70..0.95 (and a per-column choice) scored by the exact
            encoded size of the sample; a real number (an int, a float or a NumPy number, not
            a bool or a tensor) fixes the invariance threshold (default: ``"auto"``).
        word_bytes: codec word size T, the integer 4 or 8 (default: 4).
        sample: rows used to fit the parameters; None picks up to 65,536 seeded random rows,
            0 uses every row (default: None).
        align: byte alignment of each stored row: 1, 2, 4, 8, 16 or 32, or ``"auto"`` for
            the largest of 16..1 that costs at most 1% more space than 1 on the sample
            (default: ``"auto"``).
        seed: seed of the sample and of the cluster initialisation, an integer >= 0
            (default: 0).
        progress: show progress bars on stderr, one while the parameters are fitted (its
            count is sample rows passed through a step of the fit, the alignment choice
            included) and one while the rows are encoded; True always, False never, None
            for tables of 64 MiB or more on a terminal (a bool or None, nothing else). The
            bars change nothing that is written (default: None).
        device: ``"cpu"`` encodes with NumPy; ``"cuda"`` (or ``"cuda:N"``) encodes the rows on
            that GPU with the same code through CuPy, giving the same bytes (the parameters
            are always fitted on the CPU, on the sample) (default: ``"cpu"``).

    Returns:
        The written file, opened as an :class:`~ibp_graph.table.IBPTable`.

    Raises:
        IBPInputError: ``data`` is not a dense 2-D table of a supported dtype (a sparse
            tensor, a pickled file, a tensor on the ``meta`` device, ...) or is empty (0 rows
            or 0 columns: ``"input: the table is empty (shape (0, 8))"``), an option has the
            wrong type or is out of range (checked before any work), ``device`` is not
            ``"cpu"`` or ``"cuda[:N]"``, ``path`` is not a str, an ``os.PathLike`` or bytes,
            is empty, names a directory, would replace the input or something other than a
            regular file, or its folder is missing.
        IBPDeviceError: ``device`` is a CUDA device and no GPU is usable.
        OSError: writing failed (a full disk); the message names ``path`` and nothing is
            left behind.
    """
    opts = _check_options(clusters, threshold, word_bytes, align, sample, seed)
    clusters, th, word_bytes, align, sample, seed = opts
    progress = None if progress is None else check_bool("progress", progress)
    text = path_text("path", path)
    if not text:
        raise IBPInputError("path is empty; name the .ibp file to write")
    resolve_output(text)  # refuses a directory name, a missing folder, a device... early
    to_device, from_device, on_device = _encoder_device(device)
    if isinstance(data, (str, os.PathLike)):
        data = open_source(data)
    if isinstance(data, TableSource):
        array, name, what = data.array, data.dtype_name, data.description
    else:
        array, name = as_table(data)
        what = f"{type(data).__module__}.{type(data).__name__}"
    out = Path(text)
    if isinstance(data, TableSource) and data.path is not None and out.resolve() == data.path:
        raise IBPInputError(f"{out}: the output would overwrite the input")
    n, d = array.shape
    v = words_per_row(d, name, word_bytes)
    ids = sample_ids(n, v, sample, seed)
    raw_bytes = array.shape[0] * array.shape[1] * array.dtype.itemsize
    bar_args = {"unit": "row", "show": progress, "size": raw_bytes, "min_size": PROGRESS_MIN_BYTES}
    sample_words = rows_to_words(np.asarray(array[ids]), name, word_bytes)
    s = sample_words.shape[0]
    fit_align = 1 if align == "auto" else align
    # align="auto" encodes the sample once more, with each of the fitted clusters.
    align_work = min(clusters, s) * s if align == "auto" else 0
    total = fit_work(s, word_bytes, clusters=clusters, threshold=th) + align_work
    with work_bar(total, f"fit {out.name} ({s:,}-row sample)", **bar_args) as bar:
        fitted = fit(
            sample_words,
            name,
            clusters=clusters,
            threshold=th,
            align=fit_align,
            seed=seed,
            num_rows=n,
            bar=bar,
        )
        params = fitted.params
        k = params.num_clusters
        if align == "auto":
            if k * s < align_work:  # fewer clusters were kept than asked for
                bar.total -= align_work - k * s
                bar.refresh()
            align = choose_alignment(best_clusters(sample_words, params)[1], v, word_bytes)
            bar.update(k * s)

    batch_words = ENCODE_BATCH_WORDS if from_device is _identity else GPU_ENCODE_BATCH_WORDS
    per_batch = max(1, batch_words // v)
    sizes = np.empty(n, dtype=np.int64)
    cluster_ids = np.zeros(n, dtype=np.uint8)
    raw_rows = np.zeros(n, dtype=bool)
    with (
        IBPWriter(out) as writer,
        work_bar(n, f"compress {out.name}", **bar_args) as bar,
        on_device,
    ):
        for s in range(0, n, per_batch):
            words = to_device(rows_to_words(np.asarray(array[s : s + per_batch]), name, word_bytes))
            cl = best_clusters(words, params)[0] if k > 1 else None
            chunk = encode(words, params, align, cl)
            writer.write_rows(from_device(chunk.data))
            sizes[s : s + per_batch] = from_device(chunk.sizes)
            raw_rows[s : s + per_batch] = from_device(chunk.raw)
            if cl is not None:
                cluster_ids[s : s + per_batch] = from_device(cl)
            bar.update(words.shape[0])
        stored = int(sizes.sum())
        writer.write_rows(np.zeros(-stored % 8, dtype=np.uint8))  # whole uint64 words
        units = sizes // align
        total_units = int(units.sum())
        off_dtype = np.dtype("<u4") if total_units < 2**32 else np.dtype("<u8")
        offsets = np.zeros(n + 1, dtype=off_dtype)
        np.cumsum(units, out=offsets[1:])
        sections: dict[str, np.ndarray] = {
            "masks": params.masks,
            "code_bits": params.code_bits,
            "bitvals": params.bitvals,
            "offsets": offsets,
        }
        if k > 1:
            sections["cluster_ids"] = cluster_ids
        meta_bytes = sum(int(a.nbytes) for a in sections.values())
        per_cluster = [
            {
                "rows": int(np.count_nonzero(cluster_ids == c)),
                "stored_bytes": int(sizes[cluster_ids == c].sum()),
                "rows_raw": int(np.count_nonzero(raw_rows & (cluster_ids == c))),
            }
            for c in range(k)
        ]
        meta = {
            "shape": [n, d],
            "dtype": name,
            "word_bytes": word_bytes,
            "align": align,
            "num_clusters": k,
            "source": what,
            "stats": {
                "raw_bytes": raw_bytes,
                "stored_bytes": stored,
                "ratio": raw_bytes / stored,
                "rows_raw": int(raw_rows.sum()),
                "metadata_bytes": meta_bytes,
                "threshold": fitted.threshold,
                "threshold_sweep": list(THRESHOLDS) if th == "auto" else [th],
                "sample_rows": fitted.sample_rows,
                "column_kinds": fitted.column_kinds,
                "code_bits": fitted.code_bits_hist,
                "clusters": per_cluster,
            },
        }
        writer.finish(meta, sections)
    return IBPTable(out)
