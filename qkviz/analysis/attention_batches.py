"""One head's attention over the whole corpus, sentence batches at a time (numpy only).

Sentences are sorted by length and cut into batches of at most ``max_cells`` query-key cells, so a
batch is a padded ``[sentence, query, key]`` array with little padding. Each batch holds the same
probabilities :func:`qkviz.core.attention.attention_probs` gives sentence by sentence (the same logits, mask and
softmax of :mod:`qkviz.core.attention`; a test checks it), with padded rows and columns exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from qkviz.core.attention import allowed_pairs, attention_logits, masked_softmax
from qkviz.store.run import StoredRun

DEFAULT_MAX_CELLS = 1 << 22


@dataclass(frozen=True)
class SentenceBatch:
    """Sentences of similar length, padded to ``width`` tokens."""

    sentences: np.ndarray   # int64 [batch]: sentence numbers
    rows: np.ndarray        # int64 [batch, width]: global token index, -1 for padding
    lengths: np.ndarray     # int64 [batch]

    @property
    def valid(self) -> np.ndarray:
        """bool ``[batch, width]``: a real token, not padding."""
        return self.rows >= 0


def sentence_batches(run: StoredRun, max_cells: int = DEFAULT_MAX_CELLS,
                     sentences: np.ndarray | None = None) -> list[SentenceBatch]:
    """The run's sentences (or only ``sentences``, sentence numbers) in length-sorted batches of at most
    ``max_cells`` cells (one sentence at least)."""
    lengths = run.sentences.n_tokens.to_numpy(np.int64)
    firsts = run.sentences.first_token.to_numpy(np.int64)
    chosen_sentences = np.arange(len(lengths)) if sentences is None else np.asarray(sentences, dtype=np.int64)
    order = chosen_sentences[np.argsort(-lengths[chosen_sentences], kind="stable")]
    batches, start = [], 0
    while start < len(order):
        width = int(lengths[order[start]])
        size = max(1, max_cells // max(width * width, 1))
        chosen = order[start:start + size]
        offsets = np.arange(width)
        rows = np.where(offsets[None, :] < lengths[chosen, None], firsts[chosen, None] + offsets[None, :], -1)
        batches.append(SentenceBatch(sentences=chosen, rows=rows, lengths=lengths[chosen]))
        start += size
    return batches


def batch_mask(batch: SentenceBatch, causal: bool, sliding_window: int | None) -> np.ndarray:
    """bool ``[batch, query, key]``: both real tokens and allowed by the model's mask."""
    width = batch.rows.shape[1]
    valid = batch.valid
    return allowed_pairs(width, causal, sliding_window)[None] & valid[:, :, None] & valid[:, None, :]


def batch_attention(run: StoredRun, layer: int, head: int, batch: SentenceBatch,
                    queries: np.ndarray | None = None, keys: np.ndarray | None = None) -> np.ndarray:
    """float64 ``[batch, query, key]`` attention probabilities; padding rows and columns are 0."""
    queries = run.queries(layer, head) if queries is None else queries
    keys = run.keys(layer, head) if keys is None else keys
    rows = np.maximum(batch.rows, 0)
    logits = attention_logits(queries[rows], keys[rows], run.scale(layer), run.softcap(layer))
    return masked_softmax(logits, batch_mask(batch, run.is_causal, run.sliding_window(layer)))


def head_attention(run: StoredRun, layer: int, head: int, batches: list[SentenceBatch] | None = None
                   ) -> Iterator[tuple[SentenceBatch, np.ndarray]]:
    """``(batch, probabilities)`` over the whole corpus for one head, reading its vectors once."""
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    for batch in sentence_batches(run) if batches is None else batches:
        yield batch, batch_attention(run, layer, head, batch, queries, keys)
