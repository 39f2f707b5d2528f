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

from qkviz.analysis.statistics.batch_memo import BatchMemo
from qkviz.core.attention import allowed_pairs, attention_logits, masked_softmax
from qkviz.core.logit_rule import LogitRule
from qkviz.store.run import StoredRun

DEFAULT_MAX_CELLS = 1 << 22
#: cells of the masks :func:`batch_mask` keeps for the next head (one byte each)
MASK_CACHE_CELLS = 1 << 26


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


def batch_mask(batch: SentenceBatch, rule: LogitRule) -> np.ndarray:
    """bool ``[batch, query, key]``: both real tokens and allowed by the mask of ``rule`` (read-only: the masks
    of the latest batches are kept, up to :data:`MASK_CACHE_CELLS` cells, since every head shares them)."""

    def make() -> np.ndarray:
        valid = batch.valid
        mask = allowed_pairs(batch.rows.shape[1], rule)[None] & valid[:, :, None] & valid[:, None, :]
        mask.flags.writeable = False
        return mask

    return _MASKS.get(batch, (rule.causal, rule.window, rule.chunk), make)


#: each batch's mask under a rule (causal, sliding window, chunk), kept up to MASK_CACHE_CELLS cells
_MASKS = BatchMemo(MASK_CACHE_CELLS, weight=lambda mask: mask.size)


def workspace(name: str, shape: tuple[int, ...], dtype: type = np.float64) -> np.ndarray:
    """A float64 (or ``dtype``) array of ``shape`` with undefined contents, the same memory each time ``name`` is
    asked (grown when a larger one is asked): the per-head analyses reuse it from head to head rather than
    have the system hand out, and fault in, hundreds of megabytes of fresh pages per head. A caller keeps
    none past its own work; :func:`release_workspace` frees them."""
    size = int(np.prod(shape))
    held = _WORKSPACE.get(name)
    if held is None or held.size < size or held.dtype != dtype:
        _WORKSPACE.pop(name, None)
        _WORKSPACE[name] = np.empty(size, dtype=dtype)
    return _WORKSPACE[name][:size].reshape(shape)


def release_workspace() -> None:
    """Frees :func:`workspace`'s arrays."""
    _WORKSPACE.clear()


_WORKSPACE: dict[str, np.ndarray] = {}


def batch_attention(run: StoredRun, layer: int, head: int, batch: SentenceBatch,
                    queries: np.ndarray | None = None, keys: np.ndarray | None = None,
                    out: np.ndarray | None = None) -> np.ndarray:
    """float64 ``[batch, query, key]`` attention probabilities; padding rows and columns are 0 (``out``: a
    float64 array of that shape to hold them).

    Where the mask leaves much of the batch out (a decoder's upper triangle, a sliding window), the logits and
    softmax are computed block by block of :data:`ROW_BLOCK` query rows over the keys those rows may attend to
    (:func:`key_spans`), and the rest of each row set to 0: the same probabilities, for about half the work."""
    queries = run.queries(layer, head) if queries is None else queries
    keys = run.keys(layer, head) if keys is None else keys
    rows = np.maximum(batch.rows, 0)
    rule = run.logit_rule(layer, head)
    mask = batch_mask(batch, rule)
    spans = key_spans(batch, rule, mask)
    if spans is None:
        logits = attention_logits(queries[rows], keys[rows], rule, mask, out=out)
        return masked_softmax(logits, sink=rule.sink, overwrite=True)
    out = np.empty(mask.shape) if out is None else out
    gathered_queries, gathered_keys = queries[rows], keys[rows]
    positions = np.arange(mask.shape[1])
    for at, to in spans:
        if to.stop == to.start:                  # rows of padding only
            out[:, at] = 0.0
            continue
        block = workspace("attention-block", (mask.shape[0], at.stop - at.start, to.stop - to.start))
        logits = attention_logits(gathered_queries[:, at], gathered_keys[:, to], rule, mask[:, at, to],
                                  query_positions=positions[at], key_positions=positions[to], out=block)
        out[:, at, to] = masked_softmax(logits, sink=rule.sink, overwrite=True)
        out[:, at, :to.start] = 0.0
        out[:, at, to.stop:] = 0.0
    return out


#: query rows of one block of :func:`batch_attention` where the mask leaves much of a batch out
ROW_BLOCK = 256
#: the share of a batch's cells below which :func:`key_spans` computes it block by block
SPAN_SHARE = 0.8


def key_spans(batch: SentenceBatch, rule: LogitRule, mask: np.ndarray) -> list[tuple[slice, slice]] | None:
    """``(query rows, keys)`` blocks of :data:`ROW_BLOCK` rows of a batch, each over the keys from the first its rows
    may attend to to the last; None where they would cover more than :data:`SPAN_SHARE` of the batch (an encoder's,
    or a narrow one: the batch is computed whole). Kept with the mask for the next heads."""
    return _SPANS.get(batch, (rule.causal, rule.window, rule.chunk), lambda: _spans(rule, mask))


def _spans(rule: LogitRule, mask: np.ndarray) -> list[tuple[slice, slice]] | None:
    side = mask.shape[1]
    spans: list[tuple[slice, slice]] | None = []
    if (rule.causal or rule.window is not None or rule.chunk is not None) and side > ROW_BLOCK:
        for start in range(0, side, ROW_BLOCK):
            at = slice(start, min(side, start + ROW_BLOCK))
            used = mask[:, at].any(axis=(0, 1))
            first, last = (int(used.argmax()), side - int(used[::-1].argmax())) if used.any() else (0, 0)
            spans.append((at, slice(first, last)))
    if not spans or sum((at.stop - at.start) * (to.stop - to.start) for at, to in spans) > SPAN_SHARE * side * side:
        return None
    return spans


#: the blocks of each batch under a rule, for this many batches and rules
SPAN_CACHE_ITEMS = 4096
_SPANS = BatchMemo(SPAN_CACHE_ITEMS)


def head_attention(run: StoredRun, layer: int, head: int, batches: list[SentenceBatch] | None = None
                   ) -> Iterator[tuple[SentenceBatch, np.ndarray]]:
    """``(batch, probabilities)`` over the whole corpus for one head, reading its vectors once."""
    queries, keys = run.queries(layer, head), run.keys(layer, head)
    for batch in sentence_batches(run) if batches is None else batches:
        yield batch, batch_attention(run, layer, head, batch, queries, keys)
