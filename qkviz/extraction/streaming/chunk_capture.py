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
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerCalls, capturing
from qkviz.extraction.streaming.head_update_capture import HeadUpdateProbe
from qkviz.extraction.streaming.output_norms import OutputNormProbe
from qkviz.store import files as run_files
from qkviz.store.run_writer import RunWriter

CHUNK_BYTES = 64 * 2**20
#: float16 runs keep a float32 offset per head and position below this (see ``qkviz.store.files``).
MAX_OFFSET_POSITIONS = 512


@dataclass
class ChunkBuffers:
    """Encoded vectors of one chunk (see ``qkviz.store.files``): ``[layer, head, token, d_head]``
    in the stored dtype, and value norms ``[layer, kv_head, token]`` in float32.

    Every array has one token row more than the chunk: the last, :attr:`discard_row`, is where the padding
    of a batch lands (:class:`Scatter` copies a padded batch whole, so that its real tokens need no gathering);
    it is never written to the run."""

    queries: np.ndarray
    keys: np.ndarray
    value_norms: np.ndarray
    head_updates: np.ndarray | None = None   # [layer, head, token, 2] float32 with --head-update
    output_norms: np.ndarray | None = None   # [layer, head, token] float32 where the family allows

    @classmethod
    def allocate(cls, shape: ModelShape, n_tokens: int, dtype: np.dtype, head_update: bool = False,
                 output_norms: bool = False) -> "ChunkBuffers":
        rows = n_tokens + 1          # the chunk's tokens and the discard row
        return cls(np.zeros((shape.n_layers, shape.n_heads, rows, shape.head_dim), dtype=dtype),
                   np.zeros((shape.n_layers, shape.n_kv_heads, rows, shape.head_dim), dtype=dtype),
                   np.zeros((shape.n_layers, shape.n_kv_heads, rows), dtype=np.float32),
                   np.zeros((shape.n_layers, shape.n_heads, rows, 2), dtype=np.float32) if head_update else None,
                   np.zeros((shape.n_layers, shape.n_heads, rows), dtype=np.float32) if output_norms else None)

    @property
    def discard_row(self) -> int:
        """The token row where a batch's padding is copied (the last)."""
        return self.queries.shape[2] - 1


class Scatter:
    """The recorder's sink: encodes one batch and puts its real tokens at their chunk rows.

    A vector is stored as ``vector - offset[position]`` of its head (see ``qkviz.store.files``). The
    offsets are zero for float32 runs; for float16 runs they are each head's mean vector at each
    position over the first batch (the chunk's longest sentences), taken when a layer is first
    seen, or the ones an interrupted run saved.

    A batch is encoded and placed whole, padding included, as the model lays it out: one subtraction that
    writes the stored dtype (float16 runs) and one indexed copy into the chunk's buffer, where every real token
    goes to its chunk row and every padded position to the buffer's discard row. The encoding is the same
    numbers as ``(vector.float() - offset).to(stored dtype)`` of each real token alone.
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
        #: each layer's offsets position-first, ``[position, head, d_head]``, on the model's device
        self._offset_rows_first: dict[str, list[torch.Tensor | None]] = {name: [None] * n_layers for name in self._offsets}
        self.real: torch.Tensor | None = None       # [batch, pos] bool
        self.rows: np.ndarray | None = None         # chunk row of each real token, batch-major
        self.offset_rows: torch.Tensor | None = None  # offset row of each real token, batch-major
        self._real_index: torch.Tensor | None = None  # index of each real token in [batch x pos], batch-major
        self._positions: torch.Tensor | None = None   # offset row of every position of the batch (longer than n_positions)
        self._destinations: np.ndarray | None = None  # chunk row of every [batch x pos] slot; padding: the discard row

    def set_batch(self, attention_mask: torch.Tensor, rows: np.ndarray) -> None:
        self.real = attention_mask.bool()
        width = attention_mask.shape[1]
        positions = torch.arange(width, device=attention_mask.device)
        self.offset_rows = positions.expand_as(attention_mask)[self.real].clamp(max=self.n_positions - 1)
        self._positions = positions.clamp(max=self.n_positions - 1) if width > self.n_positions else None
        self._real_index = self.real.reshape(-1).nonzero().squeeze(1)
        self.rows = rows
        destinations = np.full(self.real.numel(), self.buffers.discard_row, dtype=np.int64)
        destinations[self._real_index.cpu().numpy()] = rows
        self._destinations = destinations

    def __call__(self, layer: int, queries: torch.Tensor, keys: torch.Tensor, value_norms: torch.Tensor) -> None:
        for vectors, buffer in ((queries, self.buffers.queries), (keys, self.buffers.keys)):
            if vectors.shape[1] != buffer.shape[1] or vectors.shape[3] != buffer.shape[3]:
                raise RuntimeError(f"layer {layer}: captured (heads, d_head) {tuple(vectors.shape[1::2])} do not match "
                                   f"the run's {(buffer.shape[1], buffer.shape[3])}")
        self._place(self.buffers.queries[layer], self._encode(run_files.QUERY_OFFSETS, layer, queries))
        self._place(self.buffers.keys[layer], self._encode(run_files.KEY_OFFSETS, layer, keys))
        self._place(self.buffers.value_norms[layer], self._padded_tokens(value_norms))

    def head_updates(self, layer: int, updates: torch.Tensor) -> None:
        """``[batch, head, pos, 2]`` (ratio, cosine) from :class:`qkviz.extraction.streaming.head_update_capture.HeadUpdateProbe`."""
        self._place(self.buffers.head_updates[layer], self._padded_tokens(updates))

    def output_norms(self, layer: int, norms: torch.Tensor) -> None:
        """``[batch, head, pos]`` ``|W_O^h v_j|`` from :class:`qkviz.extraction.streaming.output_norms.OutputNormProbe`."""
        self._place(self.buffers.output_norms[layer], self._padded_tokens(norms))

    @staticmethod
    def _padded_tokens(tensor: torch.Tensor) -> torch.Tensor:
        """``[batch, head, pos, ...]`` -> ``[batch x pos, head, ...]``, padding included (a view where the model lays
        the tensor out position-first, as most do)."""
        moved = tensor.movedim(2, 1)                                  # [batch, pos, head, ...]
        return moved.reshape(-1, *moved.shape[2:])

    def _real_tokens(self, tensor: torch.Tensor) -> torch.Tensor:
        """``[batch, head, pos, ...]`` -> ``[real token, head, ...]`` (batch-major; one gather of whole tokens)."""
        return self._padded_tokens(tensor).index_select(0, self._real_index)

    def _place(self, buffer: np.ndarray, tokens: torch.Tensor) -> None:
        """``tokens`` ``[batch x pos, head, ...]`` into one layer's ``buffer`` ``[head, chunk row, ...]``: each real
        token at its row, the padding at the discard row; one indexed assignment in numpy (in the buffer's dtype, as
        an assignment into it casts), which copies a head's rows several times faster than torch's ``index_copy_``
        into the transposed buffer."""
        placed = tokens.to(device="cpu", dtype=torch.from_numpy(buffer).dtype).numpy()
        buffer[:, self._destinations] = placed.swapaxes(0, 1)

    def _encode(self, name: str, layer: int, vectors: torch.Tensor) -> torch.Tensor:
        """``[batch x pos, head, d_head]`` in the stored dtype: each vector less its head's offset at its position
        (float32 runs: the vectors themselves, their offsets being zero)."""
        offsets = self._offsets[name]
        if self.store_dtype == torch.float32:
            if offsets[layer] is None:
                offsets[layer] = torch.zeros(vectors.shape[1], 1, vectors.shape[3])
            return self._padded_tokens(vectors)
        if offsets[layer] is None:
            offsets[layer] = self._first_offsets(self._real_tokens(vectors).float().transpose(0, 1).contiguous())
        by_position = self._offset_rows_first[name]
        if by_position[layer] is None:
            by_position[layer] = offsets[layer].transpose(0, 1).contiguous().to(vectors.device)
        moved = vectors.movedim(2, 1)                                 # [batch, pos, head, d_head]
        offset = (by_position[layer][:moved.shape[1]] if self._positions is None
                  else by_position[layer].index_select(0, self._positions))
        encoded = torch.empty(moved.shape, dtype=self.store_dtype, device=moved.device)
        torch.sub(moved, offset, out=encoded)        # computed in float32 (the offsets'), rounded once to the stored dtype
        return encoded.view(-1, *moved.shape[2:])

    def _first_offsets(self, real: torch.Tensor) -> torch.Tensor:
        """``[head, position, d_head]``: per-position means (the head mean where a position is absent) of ``real``
        ``[head, token, d_head]``."""
        heads, _, d_head = real.shape
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
              head_update: bool, output_norms: bool = False) -> Iterator[AttentionRecorder]:
    """Inference with every attention call of ``model`` captured into ``scatter`` (with ``head_update``, each
    head's update relative to the hidden state too; with ``output_norms``, every head's ``|W_O^h v_j|``); yields
    the recorder, whose ``settings`` are those of every layer called so far. What the capture computes beside the
    model runs on one thread (:class:`~qkviz.extraction.capture.recorder.AttentionRecorder`'s ``one_thread``)."""
    probe = HeadUpdateProbe(model, adapter, shape, scatter.head_updates) if head_update else None
    norms = OutputNormProbe(model, adapter, shape, scatter.output_norms) if output_norms else None
    recorder = AttentionRecorder(layer_of_module, scatter, norms, one_thread=True)
    with torch.inference_mode(), capturing(model, recorder), probe or contextlib.nullcontext():
        yield recorder


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
