"""Running a text model over the selected sentences and streaming their queries and keys to the store.

Sentences are taken in chunks of contiguous tokens (bounded by ``CHUNK_BYTES`` of vectors; see
:mod:`qkviz.extraction.streaming.chunk_capture`). Inside a chunk they are sorted by length into right-padded batches
of at most ``batch_size`` sentences and :data:`BATCH_TOKENS` padded tokens (so that a batch of windows of
thousands of tokens holds few of them; a longer sentence is a batch of its own), so padding stays small and
every real token keeps positions ``0..n-1``; the captured vectors of each batch are scattered to their place
in the chunk, and the whole chunk is written at once and checkpointed.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch

from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerAttentionSettings, LayerCalls, capturing
from qkviz.extraction.streaming.chunk_capture import (CHUNK_BYTES, MAX_OFFSET_POSITIONS, ChunkBuffers, Scatter, attention_layers,
                                            bytes_per_token, progress_bar, recording, store_chunk)
from qkviz.extraction.models.loading import LoadedModel
from qkviz.extraction.inputs.selection import TokenizedSentence
from qkviz.store.run_writer import RunWriter
from qkviz.extraction.capture.forward_pass import forward

logger = logging.getLogger(__name__)

#: the most padded tokens in one forward pass (unless one sentence is longer)
BATCH_TOKENS = 8192
#: the tokens of the first sentence that the probe of every layer's attention settings runs on
PROBE_TOKENS = 32


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


def capture_sentences(loaded: LoadedModel, adapter: FamilyAdapter, shape: ModelShape,
                      sentences: list[TokenizedSentence], writer: RunWriter, batch_size: int,
                      progress: bool) -> dict[int, LayerAttentionSettings]:
    """Capture every sentence not yet on disk; return each layer's attention settings, as the capture itself recorded
    them (the scatter checks every layer's shapes as it receives them, and every layer must have been captured before
    a chunk is written). Only a run whose every chunk was on disk already runs :func:`probe_layers` for them."""
    model = loaded.model
    device = str(next(model.parameters()).device)
    store_dtype = np.dtype(writer.layout.dtype)
    chunks = chunk_sentences(sentences, max(1, CHUNK_BYTES // bytes_per_token(shape, store_dtype)))
    largest = max(sum(len(s) for s in sentences[a:b]) for a, b, _ in chunks)
    n_positions = min(MAX_OFFSET_POSITIONS, max(len(s) for s in sentences))
    head_update, output_norms = writer.layout.head_update, writer.layout.output_norms
    scatter = Scatter(ChunkBuffers.allocate(shape, largest, store_dtype, head_update, output_norms), writer.offsets,
                      n_positions)
    layer_of_module = attention_layers(model, adapter, shape)
    pad_id = pad_token_id(loaded.tokenizer)
    bar = progress_bar(writer, progress)
    with recording(model, adapter, shape, layer_of_module, scatter, head_update, output_norms) as recorder:
        for first, end, first_token in chunks:
            chunk = sentences[first:end]
            chunk_tokens = sum(len(s) for s in chunk)
            if first_token + chunk_tokens <= writer.tokens_done:
                continue
            _capture_chunk(model, scatter, chunk, batch_size, pad_id, device, bar)
            if sorted(recorder.settings) != list(range(shape.n_layers)):     # before anything of the chunk is written
                raise RuntimeError(f"captured layers {sorted(recorder.settings)} are not the model's {shape.n_layers}")
            store_chunk(writer, scatter, first_token, chunk_tokens)
            bar.set_postfix(sentences=end, refresh=False)
    bar.close()
    if recorder.settings:
        return dict(recorder.settings)
    with torch.inference_mode():   # every chunk was on disk already: a few tokens give the settings, which do not depend on the length
        probe = replace(sentences[0], token_ids=sentences[0].token_ids[:PROBE_TOKENS])
        return probe_layers(model, layer_of_module, probe, shape, pad_id, device)


def _capture_chunk(model, scatter: Scatter, chunk: list[TokenizedSentence], batch_size: int, pad_id: int,
                   device: str, bar) -> None:
    row_of_sentence = np.concatenate([[0], np.cumsum([len(s) for s in chunk])[:-1]])
    by_length = sorted(range(len(chunk)), key=lambda i: len(chunk[i]), reverse=True)
    for members in _batches([len(chunk[i]) for i in by_length], batch_size):
        members = [by_length[i] for i in members]
        batch = [chunk[i] for i in members]
        input_ids, attention_mask = padded_batch(batch, pad_id, device)
        scatter.set_batch(attention_mask,
                          np.concatenate([row_of_sentence[i] + np.arange(len(chunk[i])) for i in members]))
        forward(model, input_ids=input_ids, attention_mask=attention_mask)
        bar.update(int(attention_mask.sum()))


def _batches(lengths: list[int], batch_size: int) -> list[range]:
    """Consecutive batches of ``lengths`` (longest first): at most ``batch_size`` of them and
    :data:`BATCH_TOKENS` padded tokens each, or one sentence."""
    batches, start = [], 0
    while start < len(lengths):
        size = max(1, min(batch_size, BATCH_TOKENS // max(1, lengths[start])))
        batches.append(range(start, min(start + size, len(lengths))))
        start += size
    return batches


def probe_layers(model, layer_of_module: LayerCalls, sentence: TokenizedSentence, shape: ModelShape,
                 pad_id: int, device: str) -> dict[int, LayerAttentionSettings]:
    """One forward pass on one sentence: every layer must be captured, with the expected shapes.

    Returns each layer's attention settings (scale, causal, window, chunk, softcap, ALiBi slopes, sinks), which do not depend
    on the input."""
    seen: dict[int, tuple] = {}

    def inspect(layer, queries, keys, value_norms):
        seen[layer] = (tuple(queries.shape[1::2]), tuple(keys.shape[1::2]))

    recorder = AttentionRecorder(layer_of_module, inspect)
    with capturing(model, recorder):
        input_ids, attention_mask = padded_batch([sentence], pad_id, device)
        forward(model, input_ids=input_ids, attention_mask=attention_mask)
    expected = ((shape.n_heads, shape.head_dim), (shape.n_kv_heads, shape.head_dim))
    if sorted(seen) != list(range(shape.n_layers)) or any(v != expected for v in seen.values()):
        raise RuntimeError(f"captured (heads, d_head) per layer {seen} do not match the model's {shape}")
    return dict(recorder.settings)
