"""Running the model over the selected sentences and streaming queries and keys to the store.

Sentences are taken in chunks of contiguous tokens (bounded by :data:`CHUNK_BYTES` of vectors;
small enough that flushing one chunk to disk overlaps with computing the next).
Inside a chunk they are sorted by length into right-padded batches, so padding stays small and
every real token keeps positions ``0..n-1``; the captured vectors of each batch are scattered to
their place in the chunk, and the whole chunk is written at once and checkpointed.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from qkviz.store import files as run_files
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture import AttentionRecorder, LayerAttentionSettings, capturing
from qkviz.extraction.head_update_capture import HeadUpdateProbe
from qkviz.extraction.models import LoadedModel
from qkviz.store.run_writer import RunWriter
from qkviz.extraction.selection import TokenizedSentence

logger = logging.getLogger(__name__)

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

    @classmethod
    def allocate(cls, shape: ModelShape, n_tokens: int, dtype: np.dtype, head_update: bool = False
                 ) -> "ChunkBuffers":
        return cls(np.zeros((shape.n_layers, shape.n_heads, n_tokens, shape.head_dim), dtype=dtype),
                   np.zeros((shape.n_layers, shape.n_kv_heads, n_tokens, shape.head_dim), dtype=dtype),
                   np.zeros((shape.n_layers, shape.n_kv_heads, n_tokens), dtype=np.float32),
                   np.zeros((shape.n_layers, shape.n_heads, n_tokens, 2), dtype=np.float32) if head_update else None)


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
        self.real: torch.Tensor | None = None       # [batch, pos] bool
        self.rows: np.ndarray | None = None         # chunk row of each real token, batch-major
        self.offset_rows: torch.Tensor | None = None  # offset row of each real token, batch-major

    def set_batch(self, attention_mask: torch.Tensor, rows: np.ndarray) -> None:
        self.real = attention_mask.bool()
        positions = torch.arange(attention_mask.shape[1], device=attention_mask.device).expand_as(attention_mask)
        self.offset_rows = positions[self.real].clamp(max=self.n_positions - 1)
        self.rows = rows

    def __call__(self, layer: int, queries: torch.Tensor, keys: torch.Tensor, value_norms: torch.Tensor) -> None:
        self.buffers.queries[layer][:, self.rows] = self._encode(run_files.QUERY_OFFSETS, layer, queries)
        self.buffers.keys[layer][:, self.rows] = self._encode(run_files.KEY_OFFSETS, layer, keys)
        self.buffers.value_norms[layer][:, self.rows] = self._real_tokens(value_norms).float().cpu().numpy()

    def head_updates(self, layer: int, updates: torch.Tensor) -> None:
        """``[batch, head, pos, 2]`` (ratio, cosine) from :class:`qkviz.extraction.head_update_capture.HeadUpdateProbe`."""
        self.buffers.head_updates[layer][:, self.rows] = self._real_tokens(updates).cpu().numpy()

    def _real_tokens(self, tensor: torch.Tensor) -> torch.Tensor:
        """``[batch, head, pos, ...]`` -> ``[head, real token, ...]``."""
        return tensor.transpose(0, 1)[:, self.real]

    def _encode(self, name: str, layer: int, vectors: torch.Tensor) -> np.ndarray:
        real = self._real_tokens(vectors).float()
        offsets = self._offsets[name]
        if offsets[layer] is None:
            offsets[layer] = self._first_offsets(real)
        offset = offsets[layer].to(real.device)[:, self.offset_rows]
        return (real - offset).to(device="cpu", dtype=self.store_dtype).numpy()

    def _first_offsets(self, real: torch.Tensor) -> torch.Tensor:
        """``[head, position, d_head]``: per-position means (the head mean where a position is absent)."""
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
    """Bytes of one token in the chunk buffers."""
    vectors = (shape.n_heads + shape.n_kv_heads) * shape.head_dim * np.dtype(dtype).itemsize
    return shape.n_layers * (vectors + shape.n_kv_heads * 4)


def chunk_sentences(sentences: list[TokenizedSentence], max_tokens: int) -> list[tuple[int, int, int]]:
    """``(first sentence, end sentence, first token)`` of chunks of at most ``max_tokens`` tokens
    (a longer single sentence is a chunk of its own)."""
    chunks, first, first_token, tokens = [], 0, 0, 0
    for index, sentence in enumerate(sentences):
        if tokens and tokens + len(sentence) > max_tokens:
            chunks.append((first, index, first_token))
            first, first_token, tokens = index, first_token + tokens, 0
        tokens += len(sentence)
    if tokens:
        chunks.append((first, len(sentences), first_token))
    return chunks


def padded_batch(batch: list[TokenizedSentence], pad_id: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids`` and ``attention_mask`` ``[batch, pos]``."""
    width = max(len(s) for s in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, sentence in enumerate(batch):
        input_ids[row, :len(sentence)] = torch.tensor(sentence.token_ids, dtype=torch.long)
        attention_mask[row, :len(sentence)] = 1
    return input_ids.to(device), attention_mask.to(device)


def pad_token_id(tokenizer) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id):
        if candidate is not None:
            return int(candidate)
    return 0


def capture_run(loaded: LoadedModel, adapter: FamilyAdapter, shape: ModelShape,
                sentences: list[TokenizedSentence], writer: RunWriter, batch_size: int,
                progress: bool) -> dict[int, LayerAttentionSettings]:
    """Capture every sentence not yet on disk; return each layer's attention settings."""
    model = loaded.model
    device = str(next(model.parameters()).device)
    store_dtype = np.dtype(writer.layout.dtype)
    chunks = chunk_sentences(sentences, max(1, CHUNK_BYTES // bytes_per_token(shape, store_dtype)))
    largest = max(sum(len(s) for s in sentences[a:b]) for a, b, _ in chunks)
    n_positions = min(MAX_OFFSET_POSITIONS, max(len(s) for s in sentences))
    head_update = writer.layout.head_update
    scatter = Scatter(ChunkBuffers.allocate(shape, largest, store_dtype, head_update), writer.offsets, n_positions)
    layer_of_module = {id(module): layer for layer, module in enumerate(adapter.attention_modules(model))}
    if len(layer_of_module) != shape.n_layers:
        raise RuntimeError(f"found {len(layer_of_module)} attention modules for {shape.n_layers} layers")
    pad_id = pad_token_id(loaded.tokenizer)
    n_tokens = writer.layout.n_tokens
    bar = tqdm(total=n_tokens, initial=writer.tokens_done, unit="tok", desc="extracting", disable=not progress,
               dynamic_ncols=True)
    with torch.inference_mode():
        settings = probe_layers(model, layer_of_module, sentences[0], shape, pad_id, device)
    probe = HeadUpdateProbe(model, adapter, shape, scatter.head_updates) if head_update else None
    recorder = AttentionRecorder(layer_of_module, scatter, output_sink=probe)
    with torch.inference_mode(), capturing(model, recorder), probe or contextlib.nullcontext():
        for first, end, first_token in chunks:
            chunk = sentences[first:end]
            chunk_tokens = sum(len(s) for s in chunk)
            if first_token + chunk_tokens <= writer.tokens_done:
                continue
            _capture_chunk(model, scatter, chunk, batch_size, pad_id, device, bar)
            if writer.offsets is None:
                writer.save_offsets(scatter.offsets())
            updates = scatter.buffers.head_updates
            writer.write_chunk(first_token, scatter.buffers.queries[:, :, :chunk_tokens],
                               scatter.buffers.keys[:, :, :chunk_tokens],
                               scatter.buffers.value_norms[:, :, :chunk_tokens],
                               None if updates is None else updates[:, :, :chunk_tokens])
            writer.checkpoint(first_token + chunk_tokens)
            bar.set_postfix(sentences=end, refresh=False)
    bar.close()
    return settings


def _capture_chunk(model, scatter: Scatter, chunk: list[TokenizedSentence], batch_size: int, pad_id: int,
                   device: str, bar) -> None:
    row_of_sentence = np.concatenate([[0], np.cumsum([len(s) for s in chunk])[:-1]])
    by_length = sorted(range(len(chunk)), key=lambda i: len(chunk[i]), reverse=True)
    for start in range(0, len(by_length), batch_size):
        members = by_length[start:start + batch_size]
        batch = [chunk[i] for i in members]
        input_ids, attention_mask = padded_batch(batch, pad_id, device)
        scatter.set_batch(attention_mask,
                          np.concatenate([row_of_sentence[i] + np.arange(len(chunk[i])) for i in members]))
        model(input_ids=input_ids, attention_mask=attention_mask)
        bar.update(int(attention_mask.sum()))


def probe_layers(model, layer_of_module: dict[int, int], sentence: TokenizedSentence, shape: ModelShape,
                 pad_id: int, device: str) -> dict[int, LayerAttentionSettings]:
    """One forward pass on one sentence: every layer must be captured, with the expected shapes.

    Returns each layer's attention settings (scale, causal, window, softcap), which do not depend
    on the input."""
    seen: dict[int, tuple] = {}

    def inspect(layer, queries, keys, value_norms):
        seen[layer] = (tuple(queries.shape[1::2]), tuple(keys.shape[1::2]))

    recorder = AttentionRecorder(layer_of_module, inspect)
    with capturing(model, recorder):
        input_ids, attention_mask = padded_batch([sentence], pad_id, device)
        model(input_ids=input_ids, attention_mask=attention_mask)
    expected = ((shape.n_heads, shape.head_dim), (shape.n_kv_heads, shape.head_dim))
    if sorted(seen) != list(range(shape.n_layers)) or any(v != expected for v in seen.values()):
        raise RuntimeError(f"captured (heads, d_head) per layer {seen} do not match the model's {shape}")
    return dict(recorder.settings)
