"""Launcher of ``cuda/fetch_decode.cu``: gather rows by id and decode them in one kernel."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ..bitops import bit_runs, popcount
from .runtime import (
    FETCH_BLOCK_WARPS,
    as_cupy,
    check_block_warps,
    check_chunk_rows,
    chunk_positions,
    chunk_requests,
    chunk_spans,
    cupy_stream,
    describe,
    fetch_blocks_per_sm,
    grid_size,
    kernel,
    note_launch,
)

SOURCE = "fetch_decode.cu"
WARP = 32
#: The one-buffer kernel decodes rows of at most this many bytes of words two a warp, one a
#: half-warp (the kernel's HALF_ROW_BYTES): 16 lanes of 16 bytes.
HALF_ROW_BYTES = 256
#: ... and, in a table whose first cluster's columns have no free bit (bag-of-words tables),
#: rows of at most this many (the kernel's NO_FREE_HALF_ROW_BYTES): 16 lanes of 32 bytes.
NO_FREE_HALF_ROW_BYTES = 512

#: Shared memory a block may use without opting in.
DEFAULT_SMEM = 48 * 1024


@dataclass(frozen=True)
class SmemPlan:
    """Shared memory layout of the fused kernel for one table."""

    buf_words: int  # u32 words staging one row (16-byte chunks plus zeroed slack)
    bytes_per_warp: int
    warps_per_block: int
    buffers: int = 1  # the kernel's staging buffers per warp (2: double buffering)
    halves: bool = False  # two rows a warp, one a half-warp, in two staging buffers

    @property
    def bytes_per_block(self) -> int:
        """Dynamic shared memory of a block."""
        return self.bytes_per_warp * self.warps_per_block


def smem_plan(
    num_words: int,
    word_bytes: int,
    align: int,
    max_smem: int,
    buffers: int = 1,
    longest_row: int | None = None,
    warps: int = FETCH_BLOCK_WARPS,
    no_free: bool = False,
) -> SmemPlan:
    """Size the per-warp staging buffers for rows of ``num_words`` words.

    A stored row is at most ``align_up(V*T, align)`` bytes (``longest_row`` when the table's
    longest is known and shorter) and may start anywhere in a 16-byte chunk, so it spans at
    most ``ceil((15 + that) / 16)`` chunks; two zero words follow for reads that straddle the
    end. A warp has ``buffers`` such buffers (2: double buffering), then the V code bytes and
    C subgroup bytes. The one-buffer kernel decodes rows of at most `HALF_ROW_BYTES` bytes of
    words two a warp, one a half-warp (``halves``), each staged in a buffer of its own: two
    buffers; rows of at most `NO_FREE_HALF_ROW_BYTES` too when ``no_free`` (the table's first
    cluster has no free bit, as the kernel checks). The kernel refuses a row longer than its
    buffer (``error[1]``).

    Sizing for the longest stored row rather than the raw width matters for sparse tables:
    Cora's 5,732-byte rows are stored in at most 80 bytes, so a warp's share shrinks from
    about 7 KiB to under 2 KiB and more blocks fit an SM.

    A block has ``warps`` warps, or as many as ``max_smem`` holds when fewer.

    Raises:
        ValueError: when one warp's share exceeds ``max_smem``, or ``longest_row`` is
            negative.
    """
    if buffers not in (1, 2):
        raise ValueError(f"buffers must be 1 or 2, got {buffers!r}")
    raw = -(-num_words * word_bytes // align) * align
    if longest_row is not None:
        if longest_row < 0:
            raise ValueError(f"longest_row must be >= 0 bytes, got {longest_row}")
        raw = min(raw, int(longest_row))
    chunks = -(-(15 + raw) // 16)
    buf_words = 4 * chunks + 4
    extra_words = -(-(num_words + -(-num_words // 32)) // 4)
    words_bytes = num_words * word_bytes
    halves = buffers == 1 and (
        words_bytes <= HALF_ROW_BYTES or (no_free and words_bytes <= NO_FREE_HALF_ROW_BYTES)
    )
    per_warp = (((2 if halves else buffers) * buf_words + extra_words + 3) & ~3) * 4
    if per_warp > max_smem:
        staged = "double-buffered " if buffers == 2 else ""
        raise ValueError(
            f"{staged}rows of {num_words * word_bytes} bytes need {per_warp} bytes of shared "
            f"memory per warp, more than the {max_smem} this GPU gives a block; use the raw "
            "gather" + (" or one buffer" if buffers == 2 else "")
        )
    warps = max(1, min(int(warps), max_smem // per_warp))
    return SmemPlan(
        buf_words=buf_words,
        bytes_per_warp=per_warp,
        warps_per_block=warps,
        buffers=buffers,
        halves=halves,
    )


def codec_prefixes(
    masks: np.ndarray, code_bits: np.ndarray, word_bytes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster prefix sums of the code widths and of the free (unmasked) bits of words.

    Entry ``[c, j]`` of each ``(k, V + 1)`` uint32 array is the sum over columns ``0 .. j-1``
    of cluster ``c``: the bit offset of column ``j``'s code in a flat row's code section, and
    of its payload in a run of words of which none escapes. Computed once per table.

    Args:
        masks: ``(k, V)`` words of ``word_bytes`` bytes (any integer type of that width).
        code_bits: ``(k, V)`` code widths.
        word_bytes: 4 or 8.
    """
    k, v = code_bits.shape
    code_prefix = np.zeros((k, v + 1), dtype=np.uint32)
    free_prefix = np.zeros((k, v + 1), dtype=np.uint32)
    np.cumsum(code_bits, axis=1, dtype=np.uint32, out=code_prefix[:, 1:])
    free = 8 * word_bytes - popcount(_unsigned_words(masks, word_bytes))
    np.cumsum(free, axis=1, dtype=np.uint32, out=free_prefix[:, 1:])
    return code_prefix, free_prefix


def _unsigned_words(masks: np.ndarray, word_bytes: int) -> np.ndarray:
    """``masks`` (any integer type of ``word_bytes`` bytes) as unsigned words, same bits."""
    return np.ascontiguousarray(masks).view({4: np.uint32, 8: np.uint64}[word_bytes])


#: Bit 26 of a layout word: the column's free bits lie in at most two runs.
LAYOUT_TWO_RUNS = 1 << 26
#: Bit 13 of a layout word: the column's free bits lie in exactly three runs.
LAYOUT_THREE_RUNS = 1 << 13


def column_layouts(masks: np.ndarray, code_bits: np.ndarray, word_bytes: int) -> np.ndarray:
    """Per column of each cluster, one uint32 the fused kernel decodes a word with.

    Bits 0-6: the word's free (unmasked) bits F; 7-12: the length of the first run of free
    bits, N1 (less than the word's bits); bit 13 (`LAYOUT_THREE_RUNS`): the free bits lie in
    exactly three runs; 14-19: where the first run starts; 20-25: where the second run starts;
    bit 26 (`LAYOUT_TWO_RUNS`): the free bits lie in at most these two runs, so a payload is
    deposited by two shifts, ``(p & (2**N1 - 1)) << lo1 | (p >> N1) << lo2``, as the codec's
    `pdep` does run by run (`bitops.bit_runs`); 27-31: the code width. A column with no free
    bit has N1 = 0; one with every bit free, the runs ``[0, bits - 1)`` and ``[bits - 1,
    bits)``, so that no shift reaches the word's width. A column with three runs (two 16-bit
    floats in a 32-bit word, whose exponents' top bits are masked) is deposited by three
    shifts and masks (`column_runs`); one with more runs, by the kernel's loop over its free
    bits (`column_runs` too). Computed once per table.

    Args:
        masks: ``(k, V)`` words of ``word_bytes`` bytes (any integer type of that width).
        code_bits: ``(k, V)`` code widths (1 to 8).
        word_bytes: 4 or 8.
    """
    bits = 8 * word_bytes
    runs = bit_runs(~_unsigned_words(masks, word_bytes), bits)
    # Run lengths and starts, padded with empty runs to at least three.
    lengths = np.zeros((max(runs.count, 3),) + code_bits.shape, dtype=np.int64)
    starts = np.zeros_like(lengths)
    lengths[: runs.count] = popcount(runs.mask)
    starts[: runs.count] = runs.lo
    whole = lengths[0] == bits  # every bit free: split off the top bit
    first = np.where(whole, bits - 1, lengths[0])
    second_lo = np.where(whole, bits - 1, starts[1])
    two = (lengths[2:] == 0).all(axis=0)
    three = (lengths[2] != 0) & (lengths[3:] == 0).all(axis=0)
    layout = (
        lengths.sum(axis=0)
        | first << 7
        | three.astype(np.int64) << 13
        | starts[0] << 14
        | second_lo << 20
        | two.astype(np.int64) << 26
        | code_bits.astype(np.int64) << 27
    )
    return layout.astype(np.uint32)


#: Words per column in the table of `column_runs`.
RUN_WORDS = 4


def column_runs(masks: np.ndarray, word_bytes: int) -> np.ndarray:
    """Per column of each cluster, `RUN_WORDS` words to deposit a payload with beyond two runs.

    The fused kernel reads them where the layout word's two shifts do not suffice
    (`column_layouts`).

    A column whose free (unmasked) bits lie in exactly three runs: the three runs' masks, first
    to third, then their shifts, a byte each (bits 0-7, 8-15, 16-23), the shift of a run being
    where it starts less the payload bits before it (`bitops.bit_runs`): the payload ``p``
    lands as ``(p << s1) & m1 | (p << s2) & m2 | (p << s3) & m3``, the codec's `pdep`. A
    column with more runs: its free bits, then zeros (the kernel's loop over its runs). Zeros
    for a column of at most two runs, whose entry the kernel never reads; so a table whose
    every column has at most two runs (float32 and bag-of-words tables) gets a single entry,
    not ``k * V``. Computed once per table.

    Args:
        masks: ``(k, V)`` words of ``word_bytes`` bytes (any integer type of that width).
        word_bytes: 4 or 8.

    Returns:
        ``(k, V, RUN_WORDS)`` unsigned words of ``word_bytes`` bytes, or ``(1, 1, RUN_WORDS)``
        zeros where no column has more than two runs.
    """
    free = ~_unsigned_words(masks, word_bytes)
    starts = free & ~(free << free.dtype.type(1))  # a run's lowest bit, one set bit a run
    if free.size == 0 or popcount(starts).max() < 3:  # (without splitting the runs out)
        return np.zeros((1, 1, RUN_WORDS), dtype=free.dtype)
    runs = bit_runs(free, 8 * word_bytes)
    out = np.zeros(free.shape + (RUN_WORDS,), dtype=free.dtype)
    if runs.count == 3:  # (at most three runs in every column)
        three = runs.mask[2] != 0
    else:
        three = (runs.mask[2] != 0) & (runs.mask[3] == 0)
    more = (runs.mask[2] != 0) & ~three
    for r in range(3):
        out[..., r] = np.where(three, runs.mask[r] << runs.lo[r], 0)
    shifts = sum((runs.lo[r] - runs.dst[r]).astype(np.uint64) << np.uint64(8 * r) for r in range(3))
    out[..., 3] = np.where(three, shifts, 0).astype(free.dtype)
    out[..., 0] = np.where(more, free, out[..., 0])
    return out


@dataclass(frozen=True)
class DeviceCodec:
    """What the kernel reads of a table: row bytes (pinned host or device) and metadata.

    Attributes:
        rows_ptr: device-visible address of the row section, readable 16 bytes past its end.
        offsets: ``(N + 1,)`` CUDA tensor, int32 (holding uint32) or int64, units of ``align``.
        cluster_ids: ``(N,)`` uint8 CUDA tensor, or None for one cluster.
        masks: ``(k, V)`` int32/int64 CUDA tensor (the words' bits).
        code_bits: ``(k, V)`` uint8 CUDA tensor.
        bitvals: ``(k, E, V)`` int32/int64 CUDA tensor, the dictionaries code-major (entry
            ``[c, e, j]`` is the codec's ``bitvals[c, j, e]``): `CodecParams.match_values`.
        num_rows, num_words, word_bytes, align, row_bytes: the table's geometry.
        longest_row: bytes of the table's longest stored row (its offsets' largest step
            times ``align``), or None (the default) for the longest a row can be. The staging
            buffers are sized for it (`smem_plan`); a row longer than it is refused as
            corrupt (``error[1]``), never staged past its buffer.

    The tensors are read by every launch and never change: they are checked once here, and
    a launch passes their addresses (`const_args`) instead of exchanging a DLPack view of each
    (an event record and wait apiece); the prefix sums of `codec_prefixes`, the
    `column_layouts` and the `column_runs` are derived from them here too (`prefix_tensors`,
    `layout_tensor`, `runs_tensor`), so that every launch, from any thread, reads the same
    tensors. Build them on the device and let the copies complete (synchronise) before the
    first fetch on another stream. Keep the codec alive until the launches reading its tensors
    are done (a table's pinned buffer holds it: `ibp_graph.pinned.PinnedBuffer.hold`).

    Raises:
        ValueError: a tensor has the wrong type, device, dtype, shape or layout (named).
    """

    rows_ptr: int
    offsets: torch.Tensor
    cluster_ids: torch.Tensor | None
    masks: torch.Tensor
    code_bits: torch.Tensor
    bitvals: torch.Tensor
    num_rows: int
    num_words: int
    word_bytes: int
    align: int
    row_bytes: int
    longest_row: int | None = None

    def __post_init__(self) -> None:
        word = {4: torch.int32, 8: torch.int64}.get(self.word_bytes)
        if word is None:
            raise ValueError(f"word_bytes must be 4 or 8, got {self.word_bytes}")
        masks, bitvals, v = self.masks, self.bitvals, self.num_words
        k = masks.shape[0] if isinstance(masks, torch.Tensor) and masks.dim() == 2 else -1
        e = bitvals.shape[1] if isinstance(bitvals, torch.Tensor) and bitvals.dim() == 3 else -1
        want = {
            "offsets": ((self.num_rows + 1,), (torch.int32, torch.int64)),
            "masks": ((k, v), (word,)),
            "code_bits": ((k, v), (torch.uint8,)),
            "bitvals": ((k, e, v), (word,)),
        }
        if self.cluster_ids is not None:
            want["cluster_ids"] = ((self.num_rows,), (torch.uint8,))
        if self.longest_row is not None and (
            not isinstance(self.longest_row, int) or self.longest_row < 0
        ):
            raise ValueError(f"longest_row must be None or bytes >= 0, got {self.longest_row!r}")
        device = self.offsets.device if isinstance(self.offsets, torch.Tensor) else None
        for name, (shape, dtypes) in want.items():
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.device != device:
                raise ValueError(f"{name} must be a tensor on {device}, got {describe(t)}")
            if tuple(t.shape) != shape or t.dtype not in dtypes or not t.is_contiguous():
                raise ValueError(
                    f"{name} must be a contiguous {shape} tensor of {' or '.join(map(str, dtypes))}"
                    f", got {t.dtype} {tuple(t.shape)}"
                )
        # Derived once, here: derived at the first fetch instead, two threads fetching at once
        # could each derive them, and one launch with the addresses of tensors that the
        # other then replaced (and so freed).
        masks, code_bits = self.masks.cpu().numpy(), self.code_bits.cpu().numpy()
        device = self.masks.device
        host_prefixes = codec_prefixes(masks, code_bits, self.word_bytes)
        prefixes = tuple(torch.from_numpy(p.view(np.int32)).to(device) for p in host_prefixes)
        layouts = column_layouts(masks, code_bits, self.word_bytes)
        layout = torch.from_numpy(layouts.view(np.int32)).to(device)
        runs = column_runs(masks, self.word_bytes)
        runs_tensor = torch.from_numpy(runs.view(masks.dtype)).to(device)
        cids = 0 if self.cluster_ids is None else self.cluster_ids.data_ptr()
        addresses = (
            self.offsets.data_ptr(),
            cids,
            self.masks.data_ptr(),
            self.code_bits.data_ptr(),
            self.bitvals.data_ptr(),
            prefixes[0].data_ptr(),
            prefixes[1].data_ptr(),
            layout.data_ptr(),
        )
        object.__setattr__(self, "_no_free", bool(host_prefixes[1][0, -1] == 0))
        object.__setattr__(self, "_prefix_tensors", prefixes)
        object.__setattr__(self, "_layout_tensor", layout)
        object.__setattr__(self, "_runs_tensor", runs_tensor)
        object.__setattr__(self, "_const_args", tuple(np.uint64(p) for p in addresses))

    @property
    def prefix_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """`codec_prefixes` of the table as ``(k, V + 1)`` int32 tensors on its device."""
        return self._prefix_tensors

    @property
    def first_cluster_no_free(self) -> bool:
        """Whether no column of the first cluster has a free bit (bag-of-words tables).

        The one-buffer kernel then decodes rows of up to `NO_FREE_HALF_ROW_BYTES` bytes of
        words two a warp, as the table's `plan` stages them.
        """
        return self._no_free

    @property
    def layout_tensor(self) -> torch.Tensor:
        """`column_layouts` of the table as a ``(k, V)`` int32 tensor on its device."""
        return self._layout_tensor

    @property
    def runs_tensor(self) -> torch.Tensor:
        """`column_runs` as a tensor of the masks' dtype on their device.

        The kernel's last parameter (`const_args` has the others).
        """
        return self._runs_tensor

    @property
    def const_args(self) -> tuple[np.uint64, ...]:
        """Addresses of the constant tensors, in the kernel's order (cluster ids 0: none).

        All but `runs_tensor`'s, which the kernel takes last.
        """
        return self._const_args

    def plan(self, max_smem: int, buffers: int = 1, warps: int = FETCH_BLOCK_WARPS) -> SmemPlan:
        """The shared-memory plan of this table for a block limit of ``max_smem`` (cached).

        ``warps``: the warps a block should have (fewer when ``max_smem`` holds fewer).
        """
        return _cached_plan(
            self.num_words,
            self.word_bytes,
            self.align,
            int(max_smem),
            buffers,
            self.longest_row,
            int(warps),
            self._no_free,
        )


@functools.lru_cache(maxsize=256)
def _cached_plan(
    num_words: int,
    word_bytes: int,
    align: int,
    max_smem: int,
    buffers: int,
    longest_row: int | None,
    warps: int,
    no_free: bool,
) -> SmemPlan:
    return smem_plan(num_words, word_bytes, align, max_smem, buffers, longest_row, warps, no_free)


def _entry(codec: DeviceCodec, double_buffer: bool) -> str:
    o = 8 if codec.offsets.dtype == torch.int64 else 4
    db = "db_" if double_buffer else ""
    return f"ibp_fetch_decode_{db}w{codec.word_bytes}_o{o}"


def check_idx(idx: torch.Tensor, device: torch.device) -> None:
    """Validate the row ids of a fetch: a contiguous 1-D int64 tensor on ``device``."""
    if not isinstance(idx, torch.Tensor) or idx.device != device:
        raise ValueError(f"idx must be a CUDA tensor on {device}, got {describe(idx)}")
    if idx.dtype != torch.int64 or idx.dim() != 1 or not idx.is_contiguous():
        raise ValueError(
            f"idx must be a contiguous 1-D int64 tensor, got {idx.dtype} {tuple(idx.shape)}"
        )


def check_launch(idx: torch.Tensor, out: torch.Tensor, row_bytes: int, device: torch.device):
    """Validate the index and output tensors of a fetch, naming the bad argument."""
    check_idx(idx, device)
    if not isinstance(out, torch.Tensor) or out.device != device:
        raise ValueError(f"out must be a CUDA tensor on {device}, got {describe(out)}")
    if not out.is_contiguous() or out.shape[0] != idx.shape[0]:
        raise ValueError(f"out must be contiguous with {idx.shape[0]} rows, got {tuple(out.shape)}")
    if out.numel() * out.element_size() != idx.shape[0] * row_bytes:
        raise ValueError(
            f"out holds {out.numel() * out.element_size()} bytes, expected "
            f"{idx.shape[0]} rows of {row_bytes} bytes"
        )


def check_out_pos(out_pos: torch.Tensor | None, idx: torch.Tensor, device: torch.device) -> None:
    """Validate the output positions of a fetch: None, or one int64 per id on ``device``.

    The values (a permutation of ``0 .. len(idx) - 1``) are not checked: `sort_ids` makes
    them with ``torch.sort``, and reading them back would synchronise.
    """
    if out_pos is None:
        return
    if (
        not isinstance(out_pos, torch.Tensor)
        or out_pos.device != device
        or out_pos.dtype != torch.int64
        or out_pos.shape != idx.shape
        or not out_pos.is_contiguous()
    ):
        got = (
            f"{out_pos.dtype} {tuple(out_pos.shape)} on {out_pos.device}"
            if isinstance(out_pos, torch.Tensor)
            else type(out_pos).__name__
        )
        raise ValueError(
            f"out_pos must be None or a contiguous 1-D int64 tensor of {idx.shape[0]} "
            f"positions on {device}, got {got}"
        )


def check_error(error: torch.Tensor, device: torch.device) -> None:
    """Validate the ``(2,)`` int32 error slots of a launch."""
    if not isinstance(error, torch.Tensor) or error.device != device:
        raise ValueError(f"error must be a CUDA tensor on {device}, got {describe(error)}")
    if error.dtype != torch.int32 or error.shape != (2,) or not error.is_contiguous():
        raise ValueError(
            f"error must be a contiguous (2,) int32 tensor, got {error.dtype} {tuple(error.shape)}"
        )


def fetch_decode(
    codec: DeviceCodec,
    idx: torch.Tensor,
    out: torch.Tensor,
    error: torch.Tensor,
    *,
    out_pos: torch.Tensor | None = None,
    stream: torch.cuda.Stream | None = None,
    max_blocks: int | None = None,
    double_buffer: bool = False,
    chunk_rows: int | None = None,
    block_warps: int | None = None,
) -> None:
    """Decode rows ``idx`` of a table into ``out`` on ``stream`` (the current one if None).

    Row ``idx[r]`` goes to row ``out_pos[r]`` of ``out`` (row ``r`` when ``out_pos`` is None).
    ``idx``, ``out``, ``out_pos`` and ``error`` live on the device of the codec's tensors.
    ``error`` is a zeroed ``(2,)`` int32 CUDA tensor: afterwards ``error[0]`` holds 1 + the
    smallest output position of an out-of-range id and ``error[1]`` 1 + the smallest output
    position of a corrupt row (0 when none); the output rows of both are zero-filled, so every
    row of ``out`` is written. A warp decodes a row; the one-buffer kernel decodes rows of at
    most `HALF_ROW_BYTES` bytes of words two a warp, one a half-warp (and, in a table whose
    first cluster has no free bit, rows of at most `NO_FREE_HALF_ROW_BYTES`). Give every
    launch its own slots, zeroed on ``stream``. The launch does not synchronise; ``stream``
    waits for the work queued on torch's current stream before it starts.

    Args:
        codec: the table's device-side description.
        idx: row ids, a contiguous 1-D int64 tensor.
        out: the decoded rows, contiguous, ``len(idx)`` rows of ``codec.row_bytes`` bytes.
        error: the launch's zeroed error slots.
        out_pos: where each row goes in ``out``, a contiguous 1-D int64 tensor holding a
            permutation of ``0 .. len(idx) - 1`` (not checked), e.g. the permutation of
            ``torch.sort(ids)`` with ``idx`` the sorted ids (default: None, row ``r`` to
            ``r``).
        stream: the torch stream to launch on (default: None, the current one).
        max_blocks: cap on the grid (default: None, `runtime.fetch_blocks_per_sm`: a block on
            a quarter of the SMs when ``stream`` is given, every block the SMs hold when it is
            None; never more than the device holds at once).
        double_buffer: launch the double-buffered kernel (default: False): each warp stages
            its next row with asynchronous copies (``cp.async``, sm_80 and newer) while it
            decodes the current one, and reads the ids and offsets of the rows after it
            ahead, in twice the staging shared memory. Same output and errors, bit for bit.
        chunk_rows: launch the fetch as kernels of at most this many rows each, one after
            another on ``stream`` (`runtime.chunk_spans`), so that its blocks leave the SMs
            between them. Same output and errors (default: None, one launch).
        block_warps: warps per block, 1 to 32 (default: None, `runtime.FETCH_BLOCK_WARPS`,
            8; fewer when a block's shared memory holds fewer). The grid cap counts blocks,
            so more warps a block decode more rows at once on the same SMs. Same output and
            errors.

    Raises:
        ValueError: a tensor has the wrong device, type, shape or alignment (named), or a row
            needs more shared memory than a block gets (use the raw gather).
    """
    device = codec.offsets.device
    check_launch(idx, out, codec.row_bytes, device)
    check_out_pos(out_pos, idx, device)
    check_error(error, device)
    if codec.rows_ptr % 16:
        raise ValueError(f"rows_ptr {codec.rows_ptr:#x} is not 16-byte aligned")
    if codec.row_bytes == codec.num_words * codec.word_bytes and out.data_ptr() % codec.word_bytes:
        # Rows of whole words are stored word by word: out must be word-aligned.
        raise ValueError(
            f"out must start at a multiple of {codec.word_bytes} bytes, got {out.data_ptr():#x}"
        )
    n = idx.shape[0]
    spans = chunk_spans(n, check_chunk_rows(chunk_rows))
    warps = check_block_warps(block_warps)
    if n == 0:
        return
    out_pos = chunk_positions(out_pos, n, spans, stream, device)
    props = torch.cuda.get_device_properties(device)
    max_smem = int(getattr(props, "shared_memory_per_block_optin", DEFAULT_SMEM))
    plan = codec.plan(max_smem, 2 if double_buffer else 1, warps)
    threads = WARP * plan.warps_per_block
    # The kernel, its attribute, the DLPack views and the launch all in device's context, on
    # the launch stream (see runtime.cupy_stream).
    with cupy_stream(stream, device):
        wide = plan.bytes_per_block > DEFAULT_SMEM
        fn = kernel(
            SOURCE, _entry(codec, double_buffer), device.index, max_smem=max_smem if wide else None
        )
        rows_per_block = plan.warps_per_block * (2 if plan.halves else 1)
        grid = grid_size(
            -(-spans[0][1] // rows_per_block),
            device,
            max_blocks,
            kernel_fn=fn,
            threads=threads,
            smem=plan.bytes_per_block,
            per_sm=fetch_blocks_per_sm(stream),
        )
        out_arg, error_arg = as_cupy(out.view(torch.uint8).reshape(-1)), as_cupy(error)
        # Every DLPack view before the launch mark: making one may queue a wait on the stream.
        views = (as_cupy(idx), None if out_pos is None else as_cupy(out_pos))
        requests = chunk_requests(idx, out_pos, spans, views)
        # The arguments every chunk shares, made once (a chunk's own: its requests, their
        # output positions and its row count).
        table_args = (np.uint64(codec.rows_ptr), *codec.const_args)
        sizes = (
            np.int64(codec.num_rows),
            np.int32(codec.num_words),
            np.int32(codec.bitvals.shape[1]),
            np.int32(codec.align),
            np.int32(codec.row_bytes),
            np.int32(plan.buf_words),
            np.uint64(codec.runs_tensor.data_ptr()),
        )
        note_launch(stream)
        for (r0, r1), (idx_arg, pos_arg) in zip(spans, requests, strict=True):
            args = (*table_args, idx_arg, pos_arg, out_arg, error_arg, np.int64(r1 - r0), *sizes)
            fn((grid,), (threads,), args, shared_mem=plan.bytes_per_block)
