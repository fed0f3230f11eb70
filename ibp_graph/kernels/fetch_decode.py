"""Launcher of ``cuda/fetch_decode.cu``: gather rows by id and decode them in one kernel."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .runtime import as_cupy, cupy_stream, describe, grid_size, kernel

SOURCE = "fetch_decode.cu"
WARP = 32
MAX_WARPS_PER_BLOCK = 8
#: Shared memory a block may use without opting in.
DEFAULT_SMEM = 48 * 1024


@dataclass(frozen=True)
class SmemPlan:
    """Shared memory layout of the fused kernel for one table."""

    buf_words: int  # u32 words staging one row (16-byte chunks plus zeroed slack)
    bytes_per_warp: int
    warps_per_block: int

    @property
    def bytes_per_block(self) -> int:
        """Dynamic shared memory of a block."""
        return self.bytes_per_warp * self.warps_per_block


def smem_plan(num_words: int, word_bytes: int, align: int, max_smem: int) -> SmemPlan:
    """Size the per-warp staging buffer for rows of ``num_words`` words.

    A stored row is at most ``align_up(V*T, align)`` bytes and may start anywhere in a 16-byte
    chunk, so it spans at most ``ceil((15 + that) / 16)`` chunks; two zero words follow for
    reads that straddle the end. The V code bytes and C subgroup bytes come after.

    Raises:
        ValueError: when one warp's share exceeds ``max_smem``.
    """
    raw = -(-num_words * word_bytes // align) * align
    chunks = -(-(15 + raw) // 16)
    buf_words = 4 * chunks + 4
    extra_words = -(-(num_words + -(-num_words // 32)) // 4)
    per_warp = ((buf_words + extra_words + 3) & ~3) * 4
    if per_warp > max_smem:
        raise ValueError(
            f"rows of {num_words * word_bytes} bytes need {per_warp} bytes of shared memory "
            f"per warp, more than the {max_smem} this GPU gives a block; use the raw gather"
        )
    warps = max(1, min(MAX_WARPS_PER_BLOCK, max_smem // per_warp))
    return SmemPlan(buf_words=buf_words, bytes_per_warp=per_warp, warps_per_block=warps)


@dataclass(frozen=True)
class DeviceCodec:
    """What the kernel reads of a table: row bytes (pinned host or device) and metadata.

    Attributes:
        rows_ptr: device-visible address of the row section, readable 16 bytes past its end.
        offsets: ``(N + 1,)`` CUDA tensor, int32 (holding uint32) or int64, units of ``align``.
        cluster_ids: ``(N,)`` uint8 CUDA tensor, or None for one cluster.
        masks: ``(k, V)`` int32/int64 CUDA tensor (the words' bits).
        code_bits: ``(k, V)`` uint8 CUDA tensor.
        bitvals: ``(k, V, E)`` int32/int64 CUDA tensor.
        num_rows, num_words, word_bytes, align, row_bytes: the table's geometry.
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


def _entry(codec: DeviceCodec) -> str:
    o = 8 if codec.offsets.dtype == torch.int64 else 4
    return f"ibp_fetch_decode_w{codec.word_bytes}_o{o}"


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
    stream: torch.cuda.Stream | None = None,
    max_blocks: int | None = None,
) -> None:
    """Decode rows ``idx`` of a table into ``out`` on ``stream`` (the current one if None).

    ``idx``, ``out`` and ``error`` live on the device of the codec's tensors. ``error`` is a
    zeroed ``(2,)`` int32 CUDA tensor: afterwards ``error[0]`` holds 1 + the position of an
    out-of-range id and ``error[1]`` 1 + the position of a corrupt row (0 when none); give
    every launch its own, zeroed on ``stream``. The launch does not synchronise; ``stream``
    waits for the work queued on torch's current stream before it starts.

    Raises:
        ValueError: a tensor has the wrong device, type, shape or alignment (named).
    """
    device = codec.offsets.device
    check_launch(idx, out, codec.row_bytes, device)
    check_error(error, device)
    if codec.rows_ptr % 16:
        raise ValueError(f"rows_ptr {codec.rows_ptr:#x} is not 16-byte aligned")
    if codec.row_bytes == codec.num_words * codec.word_bytes and out.data_ptr() % codec.word_bytes:
        # Rows of whole words are stored word by word: out must be word-aligned.
        raise ValueError(
            f"out must start at a multiple of {codec.word_bytes} bytes, got {out.data_ptr():#x}"
        )
    n = idx.shape[0]
    if n == 0:
        return
    props = torch.cuda.get_device_properties(device)
    max_smem = int(getattr(props, "shared_memory_per_block_optin", DEFAULT_SMEM))
    plan = smem_plan(codec.num_words, codec.word_bytes, codec.align, max_smem)
    grid = grid_size(-(-n // plan.warps_per_block), device, max_blocks)
    # The kernel, its attribute, the DLPack views and the launch all in device's context, on
    # the launch stream (see runtime.cupy_stream).
    with cupy_stream(stream, device):
        fn = kernel(SOURCE, _entry(codec), device.index)
        if plan.bytes_per_block > DEFAULT_SMEM:
            fn.max_dynamic_shared_size_bytes = plan.bytes_per_block
        args = (
            np.uint64(codec.rows_ptr),
            as_cupy(codec.offsets),
            as_cupy(codec.cluster_ids) if codec.cluster_ids is not None else np.uint64(0),
            as_cupy(codec.masks),
            as_cupy(codec.code_bits),
            as_cupy(codec.bitvals),
            as_cupy(idx),
            as_cupy(out.view(torch.uint8).reshape(-1)),
            as_cupy(error),
            np.int64(n),
            np.int64(codec.num_rows),
            np.int32(codec.num_words),
            np.int32(codec.bitvals.shape[2]),
            np.int32(codec.align),
            np.int32(codec.row_bytes),
            np.int32(plan.buf_words),
        )
        fn((grid,), (WARP * plan.warps_per_block,), args, shared_mem=plan.bytes_per_block)
