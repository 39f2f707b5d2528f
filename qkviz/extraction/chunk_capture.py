"""What the text and image forward loops share: a chunk's buffers, the scatter that fills them from the
captured attention calls, and handing a full chunk to the run writer.

A forward loop takes its inputs in chunks of contiguous tokens (bounded by :data:`CHUNK_BYTES` of vectors;
small enough that flushing one chunk to disk overlaps with computing the next), captures each batch into
the chunk's buffers (:class:`Scatter`), and hands the whole chunk to the :class:`RunWriter` at once
(:func:`store_chunk`), which checkpoints it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture import AttentionRecorder, LayerCalls, capturing
from qkviz.extraction.head_update_capture import HeadUpdateProbe
from qkviz.extraction.output_norms import OutputNormProbe
from qkviz.store import files as run_files
from qkviz.store.run_writer import RunWriter

CHUNK_BYTES = 64 * 2**20
#: float16 runs keep a float32 offset per head and position below this (see ``qkviz.store.files``).
MAX_OFFSET_POSITIONS = 512


@dataclass
class ChunkBuffers:
    """Encoded vectors of one chunk (see ``qkviz.store.files``): ``[layer, head, token, d_head]``
    in the stored dtype, and value norms ``[layer, kv_head, token]`` in float32."""

    queries: np.ndarray
    keys: np.ndarray
    value_norms: np.ndarray
    head_updates: np.ndarray | None = None   # [layer, head, token, 2] float32 with --head-update
    output_norms: np.ndarray | None = None   # [layer, head, token] float32 where the family allows

    @classmethod
    def allocate(cls, shape: ModelShape, n_tokens: int, dtype: np.dtype, head_update: bool = False,
                 output_norms: bool = False) -> "ChunkBuffers":
        return cls(np.zeros((shape.n_layers, shape.n_heads, n_tokens, shape.head_dim), dtype=dtype),
                   np.zeros((shape.n_layers, shape.n_kv_heads, n_tokens, shape.head_dim), dtype=dtype),
                   np.zeros((shape.n_layers, shape.n_kv_heads, n_tokens), dtype=np.float32),
                   np.zeros((shape.n_layers, shape.n_heads, n_tokens, 2), dtype=np.float32) if head_update else None,
                   np.zeros((shape.n_layers, shape.n_heads, n_tokens), dtype=np.float32) if output_norms else None)


class Scatter:
    """The recorder's sink: encodes one batch's real tokens and puts them at their chunk rows.

    A vector is stored as ``vector - offset[position]`` of its head (see ``qkviz.store.files``). The
    offsets are zero for float32 runs; for float16 runs they are each head's mean vector at each
    position over the first batch (the chunk's longest sentences), taken when a layer is first
    seen, or the ones an interrupted run saved.
    """

    def __init__(self, buffers: ChunkBuffers, offsets: dict[str, np.ndarray] | None, n_positions: int):
        self.buffers = buffers
        self.store_dtype = torch.float16 if buffers.queries.dtype == np.float16 else torch.float32
        self.n_positions = n_positions if self.store_dtype == torch.float16 else 1
        n_layers = len(buffers.queries)
        self._offsets = {name: [None] * n_layers for name in (run_files.QUERY_OFFSETS, run_files.KEY_OFFSETS)}
        if offsets is not None:
            for name, array in offsets.items():
                self._offsets[name] = [torch.from_numpy(np.array(layer)) for layer in array]
        #: each layer's offsets position-first, ``[position, head, d_head]`` (what a batch's tokens gather)
        self._offset_rows_first: dict[str, list[torch.Tensor | None]] = {name: [None] * n_layers for name in self._offsets}
        self.real: torch.Tensor | None = None       # [batch, pos] bool
        self.rows: np.ndarray | None = None         # chunk row of each real token, batch-major
        self.offset_rows: torch.Tensor | None = None  # offset row of each real token, batch-major
        self._real_index: torch.Tensor | None = None  # index of each real token in [batch x pos], batch-major
        self._chunk_rows: torch.Tensor | None = None  # self.rows as a tensor

    def set_batch(self, attention_mask: torch.Tensor, rows: np.ndarray) -> None:
        self.real = attention_mask.bool()
        positions = torch.arange(attention_mask.shape[1], device=attention_mask.device).expand_as(attention_mask)
        self.offset_rows = positions[self.real].clamp(max=self.n_positions - 1)
        self._real_index = self.real.reshape(-1).nonzero().squeeze(1)
        self.rows = rows
        self._chunk_rows = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))

    def __call__(self, layer: int, queries: torch.Tensor, keys: torch.Tensor, value_norms: torch.Tensor) -> None:
        self._place(self.buffers.queries[layer], self._encode(run_files.QUERY_OFFSETS, layer, queries))
        self._place(self.buffers.keys[layer], self._encode(run_files.KEY_OFFSETS, layer, keys))
        self._place(self.buffers.value_norms[layer], self._real_tokens(value_norms).float())

    def head_updates(self, layer: int, updates: torch.Tensor) -> None:
        """``[batch, head, pos, 2]`` (ratio, cosine) from :class:`qkviz.extraction.head_update_capture.HeadUpdateProbe`."""
        self._place(self.buffers.head_updates[layer], self._real_tokens(updates))

    def output_norms(self, layer: int, norms: torch.Tensor) -> None:
        """``[batch, head, pos]`` ``|W_O^h v_j|`` from :class:`qkviz.extraction.output_norms.OutputNormProbe`."""
        self._place(self.buffers.output_norms[layer], self._real_tokens(norms))

    def _real_tokens(self, tensor: torch.Tensor) -> torch.Tensor:
        """``[batch, head, pos, ...]`` -> ``[real token, head, ...]`` (batch-major; one gather of whole tokens)."""
        moved = tensor.movedim(2, 1)                                  # [batch, pos, head, ...]: as the model lays it
        return moved.reshape(-1, *moved.shape[2:]).index_select(0, self._real_index)

    def _place(self, buffer: np.ndarray, tokens: torch.Tensor) -> None:
        """``tokens`` ``[real token, head, ...]`` into one layer's ``buffer`` ``[head, chunk row, ...]`` at the batch's
        rows: one indexed copy (in the buffer's dtype, as an assignment into it casts)."""
        target = torch.from_numpy(buffer).transpose(0, 1)              # [chunk row, head, ...], the buffer's memory
        target.index_copy_(0, self._chunk_rows, tokens.to(device="cpu", dtype=target.dtype))

    def _encode(self, name: str, layer: int, vectors: torch.Tensor) -> torch.Tensor:
        """``[real token, head, d_head]`` in the stored dtype: each vector less its head's offset at its position."""
        real = self._real_tokens(vectors).float()
        offsets = self._offsets[name]
        if offsets[layer] is None:
            offsets[layer] = self._first_offsets(real.transpose(0, 1).contiguous())
        by_position = self._offset_rows_first[name]
        if by_position[layer] is None:
            by_position[layer] = offsets[layer].transpose(0, 1).contiguous()
        offset = by_position[layer].to(real.device).index_select(0, self.offset_rows)
        return (real - offset).to(device="cpu", dtype=self.store_dtype)

    def _first_offsets(self, real: torch.Tensor) -> torch.Tensor:
        """``[head, position, d_head]``: per-position means (the head mean where a position is absent) of ``real``
        ``[head, token, d_head]``."""
        heads, _, d_head = real.shape
        if self.store_dtype == torch.float32:
            return torch.zeros(heads, 1, d_head)
        sums = torch.zeros(heads, self.n_positions, d_head, device=real.device).index_add_(1, self.offset_rows, real)
        counts = torch.bincount(self.offset_rows, minlength=self.n_positions)
        offsets = real.mean(dim=1, keepdim=True).expand(heads, self.n_positions, d_head).clone()
        seen = counts > 0
        offsets[:, seen] = sums[:, seen] / counts[seen].to(real.dtype)[None, :, None]
        return offsets.cpu()

    def offsets(self) -> dict[str, np.ndarray]:
        """``{file: [layer, head, position, d_head] float32}``, once every layer has been seen."""
        return {name: torch.stack(layers).numpy().astype(np.float32) for name, layers in self._offsets.items()}


def bytes_per_token(shape: ModelShape, dtype: np.dtype) -> int:
    """Bytes of one token in the chunk buffers (the optional output norms counted)."""
    vectors = (shape.n_heads + shape.n_kv_heads) * shape.head_dim * np.dtype(dtype).itemsize
    return shape.n_layers * (vectors + (shape.n_kv_heads + shape.n_heads) * 4)



def attention_layers(model, adapter: FamilyAdapter, shape: ModelShape) -> LayerCalls:
    """Which layer each attention call of ``model`` is; every layer has one (a shared layer's module, one per call)."""
    layer_calls = LayerCalls(adapter.attention_modules(model))
    if layer_calls.n_layers != shape.n_layers:
        raise RuntimeError(f"found {layer_calls.n_layers} attention modules for {shape.n_layers} layers")
    return layer_calls


@contextlib.contextmanager
def recording(model, adapter: FamilyAdapter, shape: ModelShape, layer_of_module: LayerCalls, scatter: Scatter,
              head_update: bool, output_norms: bool = False) -> Iterator[None]:
    """Inference with every attention call of ``model`` captured into ``scatter`` (with ``head_update``, each
    head's update relative to the hidden state too; with ``output_norms``, every head's ``|W_O^h v_j|``)."""
    probe = HeadUpdateProbe(model, adapter, shape, scatter.head_updates) if head_update else None
    norms = OutputNormProbe(model, adapter, shape, scatter.output_norms) if output_norms else None
    recorder = AttentionRecorder(layer_of_module, scatter, norms)
    with torch.inference_mode(), capturing(model, recorder), probe or contextlib.nullcontext():
        yield


def progress_bar(writer: RunWriter, progress: bool):
    """The extraction's progress in tokens, starting where a resumed run is."""
    return tqdm(total=writer.layout.n_tokens, initial=writer.tokens_done, unit="tok", desc="extracting",
                disable=not progress, dynamic_ncols=True)


def store_chunk(writer: RunWriter, scatter: Scatter, first_token: int, count: int) -> None:
    """Write the chunk's first ``count`` tokens (``scatter``'s buffers) at ``first_token`` and checkpoint them;
    before the first chunk, the offsets its vectors are stored relative to."""
    if writer.offsets is None:
        writer.save_offsets(scatter.offsets())
    buffers = scatter.buffers
    updates, norms = buffers.head_updates, buffers.output_norms
    writer.write_chunk(first_token, buffers.queries[:, :, :count], buffers.keys[:, :, :count],
                       buffers.value_norms[:, :, :count], None if updates is None else updates[:, :, :count],
                       None if norms is None else norms[:, :, :count])
    writer.checkpoint(first_token + count)
