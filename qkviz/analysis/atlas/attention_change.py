"""How much each head's attention changed between two runs over the same tokens (two checkpoints of a model,
or a model and its fine-tune): ``qkviz.attention_change(run_a, run_b)``.

For every head and every query token of the corpus, the Jensen-Shannon distance between the head's attention
distribution in run A and in run B over the query's sentence,
``sqrt(JS(P, Q))`` with ``JS(P, Q) = (KL(P || M) + KL(Q || M)) / 2``, ``M = (P + Q) / 2`` and base-2
logarithms, so it lies in [0, 1] (0: the same distribution, 1: disjoint ones); per head its mean and median
over all queries of all sentences (the runs hold the same sentences, :func:`check_same_tokens`).

Attention is recomputed from the stored queries and keys exactly as ``run.attention(layer, head, sentence)``
does (:func:`qkviz.analysis.statistics.attention_batches.batch_attention`: each run's own logit rule -- scale, mask,
soft cap, ALiBi, sink -- and its key-value head for grouped-query attention), padded sentence batches at a time.
A key that one run's mask hides has weight 0 there, which the distance counts like any other 0.

Runs of different shapes (layers or heads) are refused: a head of one architecture has no counterpart in
another, and "layer 3" of a 6-layer and a 12-layer model are not the same place.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from qkviz.analysis.statistics.attention_batches import SentenceBatch, batch_attention, sentence_batches
from qkviz.cluster import usable_cores
from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.store.run import StoredRun, as_run

logger = logging.getLogger(__name__)

#: the table's columns, one row per head
COLUMNS = ("layer", "head", "mean_js", "median_js", "n_queries")
#: query-key cells per padded sentence batch: each thread holds about ten float64 arrays of this size
BATCH_CELLS = 1 << 20


def token_difference(run_a: StoredRun, run_b: StoredRun) -> str | None:
    """What differs between the two runs' tokens (sentence count, token count, sentence lengths, token ids),
    in words naming the first difference; None when they hold the same tokens in the same sentences."""
    if run_a.n_sentences != run_b.n_sentences:
        return f"sentence count differs ({run_a.n_sentences:,} in {run_a.path}, {run_b.n_sentences:,} in {run_b.path})"
    if run_a.n_tokens != run_b.n_tokens:
        return f"token count differs ({run_a.n_tokens:,} in {run_a.path}, {run_b.n_tokens:,} in {run_b.path})"
    lengths_a = run_a.sentences.n_tokens.to_numpy(np.int64)
    lengths_b = run_b.sentences.n_tokens.to_numpy(np.int64)
    if not np.array_equal(lengths_a, lengths_b):
        sentence = int(np.flatnonzero(lengths_a != lengths_b)[0])
        return (f"sentence {sentence} has {lengths_a[sentence]} tokens in {run_a.path} and {lengths_b[sentence]} "
                f"in {run_b.path}")
    ids_a, ids_b = run_a.tokens.token_id.to_numpy(), run_b.tokens.token_id.to_numpy()
    if not np.array_equal(ids_a, ids_b):
        token = int(np.flatnonzero(ids_a != ids_b)[0])
        sentence, position = int(run_a.tokens.sentence.iat[token]), int(run_a.tokens.position.iat[token])
        return (f"token ids differ (first at sentence {sentence}, position {position}: {run_a.tokens.token.iat[token]!r} "
                f"id {ids_a[token]} in {run_a.path}, {run_b.tokens.token.iat[token]!r} id {ids_b[token]} in {run_b.path})")
    return None


def shape_difference(run_a: StoredRun, run_b: StoredRun) -> str | None:
    """``"run A has 2 layers x 4 heads, run B 3 x 4"`` when the runs' head grids differ, else None."""
    if (run_a.n_layers, run_a.n_heads) == (run_b.n_layers, run_b.n_heads):
        return None
    return (f"{run_a.path} has {run_a.n_layers} layers x {run_a.n_heads} heads, {run_b.path} has "
            f"{run_b.n_layers} x {run_b.n_heads}")


def check_comparable(run_a: StoredRun, run_b: StoredRun) -> None:
    """A one-line :class:`QkvizError` saying what differs unless the runs hold the same tokens (same corpus,
    tokenizer and sentence selection) and the same grid of heads."""
    shape = shape_difference(run_a, run_b)
    if shape is not None:
        raise QkvizError(f"cannot compare runs of different shapes: {shape}; compare checkpoints or fine-tunes "
                         "of one architecture")
    tokens = token_difference(run_a, run_b)
    if tokens is not None:
        same = "/".join(option(name, None) for name in ("max_sentences", "max_tokens", "seed"))
        raise QkvizError(f"cannot compare runs over different tokens: {tokens}; extract both with the same corpus, "
                         f"tokenizer and {same}")


def query_js_distances(run_a: StoredRun, run_b: StoredRun, layer: int, head: int,
                       batches: list[SentenceBatch]) -> np.ndarray:
    """float64 ``[query]``: base-2 JS distance between the head's attention of each query in the two runs, for
    the queries of ``batches`` in batch order (padding left out). Where either run's head has a sink logit, the
    share of no key (:func:`with_sink_share`) is one more outcome of both distributions."""
    vectors_a = run_a.queries(layer, head), run_a.keys(layer, head)
    vectors_b = run_b.queries(layer, head), run_b.keys(layer, head)
    sinks = run_a.sink(layer, head) is not None or run_b.sink(layer, head) is not None
    distances = []
    for batch in batches:
        probs_a = batch_attention(run_a, layer, head, batch, *vectors_a)
        probs_b = batch_attention(run_b, layer, head, batch, *vectors_b)
        if sinks:
            probs_a, probs_b = with_sink_share(probs_a), with_sink_share(probs_b)
        distances.append(js_distance_rows(probs_a, probs_b)[batch.valid])
    return np.concatenate(distances) if distances else np.zeros(0)


def with_sink_share(probs: np.ndarray) -> np.ndarray:
    """``[..., key + 1]``: attention rows (which sum to less than 1 under a sink logit) with what they lack of 1,
    the sink's share, as one more entry: distributions again."""
    share = np.clip(1.0 - probs.sum(axis=-1, keepdims=True), 0.0, 1.0)
    return np.concatenate([probs, share], axis=-1)


def js_distance_rows(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``[...]``: base-2 Jensen-Shannon distance between the distributions along the last axis of ``p`` and ``q``
    (rows of zeros, such as padding, give 0)."""
    mixture = (p + q) * 0.5
    divergence = 0.5 * (_relative_entropy(p, mixture) + _relative_entropy(q, mixture))
    return np.sqrt(np.clip(divergence, 0.0, 1.0))


def _relative_entropy(p: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``sum p log2(p / m)`` over the last axis, 0 where ``p`` is 0 (``m`` is positive wherever ``p`` is)."""
    positive = p > 0
    ratio = np.divide(p, m, out=np.ones_like(p), where=positive)
    return np.sum(p * np.log2(ratio), axis=-1)


def attention_change(run_a: StoredRun | str | Path, run_b: StoredRun | str | Path, *,
                     max_cells: int = BATCH_CELLS, progress: bool = True) -> pd.DataFrame:
    """How much each head's attention changed from ``run_a`` to ``run_b`` (same corpus and tokenizer).

    Parameters
    ----------
    run_a, run_b
        Runs (or their paths) over the same tokens and with the same grid of heads; otherwise a
        :class:`QkvizError` says what differs.
    max_cells
        Query-key cells per padded sentence batch (memory: about ``80 * max_cells`` bytes per thread).
    progress
        Show a progress bar over the heads.

    Returns
    -------
    pandas.DataFrame
        One row per head in model order: ``layer``, ``head``, ``mean_js`` and ``median_js`` (the mean and
        median over every query of the corpus of the base-2 Jensen-Shannon distance, in [0, 1], between
        the head's attention distributions in the two runs) and ``n_queries``.
    """
    from tqdm.auto import tqdm

    run_a, run_b = as_run(run_a), as_run(run_b)
    check_comparable(run_a, run_b)
    started = time.perf_counter()
    batches = sentence_batches(run_a, max_cells)
    heads = [(layer, head) for layer in range(run_a.n_layers) for head in range(run_a.n_heads)]
    for run in (run_a, run_b):   # opens the arrays and tables before threads share them
        run.queries(0, 0), run.keys(0, 0)

    def measure(layer_head: tuple[int, int]) -> tuple[float, float, int]:
        distances = query_js_distances(run_a, run_b, *layer_head, batches)
        return float(distances.mean()), float(np.median(distances)), len(distances)

    rows = []
    with ThreadPoolExecutor(usable_cores()) as pool, tqdm(total=len(heads), desc="attention change", unit="head",
                                                          disable=not progress, dynamic_ncols=True) as bar:
        for (layer, head), (mean, median, count) in zip(heads, pool.map(measure, heads)):
            rows.append((layer, head, mean, median, count))
            bar.update()
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    logger.info("attention change of %d heads over %d queries in %.1f s", len(table), run_a.n_tokens,
                time.perf_counter() - started)
    return table


def most_changed(table: pd.DataFrame, count: int = 10) -> pd.DataFrame:
    """The ``count`` rows of an :func:`attention_change` table with the largest mean JS distance (ties in model
    order)."""
    return table.sort_values("mean_js", ascending=False, kind="stable").head(count)
