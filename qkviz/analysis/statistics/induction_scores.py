"""Induction and previous-token scores of every head, from the run's own attention over repeated text.

A query at position ``p`` whose token and the token before it both occurred earlier, at ``p' - 1`` and ``p'``, can
predict its successor by copying the token that followed then: an **induction head** attends from ``p`` to
``p' + 1``. A **previous-token head** attends from ``p`` to ``p - 1``. Per head: ``induction`` is the mean
attention a query with such an earlier bigram pays to the tokens that followed it (0 where the run repeats
nothing); ``previous_token`` the mean attention every query past the first pays to the token before it. Both come
from the stored queries and keys, recomputed into attention (:meth:`qkviz.store.StoredRun.attention`).

The atlas reads the same repeats batch by batch (:class:`RepeatTargets`, :class:`RepeatSums`): induction and
duplicate-token attention (to the earlier occurrences of the query's token) of every repeating query of the corpus,
special tokens left out, beside a uniform head's score.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from qkviz.analysis.labels.registry import COPYING_LABELS, DUPLICATE_TOKEN, HEAD_LABEL, INDUCTION
from qkviz.analysis.statistics.attention_batches import SentenceBatch
from qkviz.store.run import StoredRun


def induction_targets(token_ids: np.ndarray) -> list[tuple[int, list[int]]]:
    """``(query position, [positions that followed an earlier occurrence of its bigram])`` of one sequence."""
    seen: dict[tuple[int, int], list[int]] = {}
    targets = []
    for position in range(1, len(token_ids)):
        bigram = (int(token_ids[position - 1]), int(token_ids[position]))
        earlier = [p + 1 for p in seen.get(bigram, []) if p + 1 < position]
        if earlier:
            targets.append((position, earlier))
        seen.setdefault(bigram, []).append(position)
    return targets


def copying_scores(run: StoredRun, heads: list[tuple[int, int]] | None = None) -> pd.DataFrame:
    """Columns ``layer``, ``head``, ``induction``, ``previous_token``, ``n_induction_queries``; one row per head."""
    heads = heads or [(layer, head) for layer in range(run.n_layers) for head in range(run.n_heads)]
    ids = run.tokens.token_id.to_numpy()
    sequences = [(sentence, induction_targets(ids[run.sentence_tokens(sentence)]))
                 for sentence in range(run.n_sentences)]
    rows = []
    for layer, head in heads:
        induction, previous, n_induction, n_previous = 0.0, 0.0, 0, 0
        for sentence, targets in sequences:
            probs = run.attention(layer, head, sentence)
            n = len(probs)
            if n > 1:
                previous += float(np.sum(probs[np.arange(1, n), np.arange(n - 1)]))
                n_previous += n - 1
            for position, followers in targets:
                induction += float(np.sum(probs[position, followers]))
                n_induction += 1
        rows.append((layer, head, induction / n_induction if n_induction else 0.0,
                     previous / n_previous if n_previous else 0.0, n_induction))
    return pd.DataFrame(rows, columns=["layer", "head", INDUCTION.name, "previous_token", "n_induction_queries"])


def duplicate_targets(token_ids: np.ndarray) -> list[tuple[int, list[int]]]:
    """``(query position, [earlier positions of the same token])`` of one sequence."""
    seen: dict[int, list[int]] = {}
    targets = []
    for position, token in enumerate(np.asarray(token_ids).tolist()):
        if token in seen:
            targets.append((position, list(seen[token])))
        seen.setdefault(token, []).append(position)
    return targets


@dataclass(frozen=True)
class RepeatTargets:
    """Where the corpus repeats itself, per sentence batch of the atlas (:mod:`qkviz.analysis.statistics.attention_batches`):
    per kind (``induction``, ``duplicate-token``) and batch the ``(sentence in batch, query, key)`` positions of every
    repeating query's targets (special tokens left out as queries), and per kind the number of repeating queries."""

    pairs: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]
    queries: dict[str, int]
    #: (mask key, kind, batch number) -> a uniform head's sum over the batch's targets: the same for every head of a mask
    chances: dict[tuple, float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, run: StoredRun, batches: list[SentenceBatch]) -> "RepeatTargets":
        ids, special = run.tokens.token_id.to_numpy(), run.tokens.is_special.to_numpy(bool)
        finders = {INDUCTION.name: induction_targets, DUPLICATE_TOKEN.name: duplicate_targets}
        pairs = {kind: [] for kind in finders}
        counts = dict.fromkeys(finders, 0)
        for batch in batches:
            found = {kind: ([], [], []) for kind in finders}
            for member, (rows, length) in enumerate(zip(batch.rows, batch.lengths)):
                rows = rows[:length]
                for kind, finder in finders.items():
                    for query, keys in finder(ids[rows]):
                        if special[rows[query]]:
                            continue
                        counts[kind] += 1
                        found[kind][0].extend([member] * len(keys))
                        found[kind][1].extend([query] * len(keys))
                        found[kind][2].extend(keys)
            for kind, (members, queries, keys) in found.items():
                pairs[kind].append(tuple(np.asarray(values, dtype=np.int64) for values in (members, queries, keys)))
        return cls(pairs, counts)


class RepeatSums:
    """One head's attention to its repeating queries' targets, batch by batch (an observer of
    :func:`qkviz.analysis.statistics.head_stats.head_statistics`): ``corpus_induction`` and ``corpus_duplicate_token``, the mean
    over repeating queries of the attention to their targets, with ``_chance`` (a uniform head's: the targets it may
    attend to over the keys it may attend to) and ``_queries`` columns (:data:`REPEAT_STATISTICS`)."""

    def __init__(self, targets: RepeatTargets, mask_key: tuple | None = None):
        """``mask_key``: what the head's mask is made of (causal, window, chunk); heads of the same key share the
        uniform head's score, computed for the first of them only (``None``: computed for this head)."""
        self.targets = targets
        self.mask_key = mask_key
        self.sums = {kind: [0.0, 0.0] for kind in targets.pairs}

    def add(self, number: int, probs: np.ndarray, mask: np.ndarray) -> None:
        for kind, per_batch in self.targets.pairs.items():
            members, queries, keys = per_batch[number]
            if len(members):
                self.sums[kind][0] += float(probs[members, queries, keys].sum())
                self.sums[kind][1] += self._chance(kind, number, mask, members, queries, keys)

    def _chance(self, kind: str, number: int, mask: np.ndarray, members: np.ndarray, queries: np.ndarray,
                keys: np.ndarray) -> float:
        """A uniform head's attention to the batch's targets of ``kind``: the targets it may attend to over the keys."""
        found = self.targets.chances.get((self.mask_key, kind, number)) if self.mask_key is not None else None
        if found is None:
            found = float((mask[members, queries, keys] / mask[members, queries].sum(axis=1)).sum())
            if self.mask_key is not None:
                self.targets.chances[(self.mask_key, kind, number)] = found
        return found

    def values(self) -> dict[str, float]:
        found = {}
        for kind, (score, chance) in self.sums.items():
            column, count = HEAD_LABEL[kind].column, self.targets.queries[kind]
            found.update({column: score / count if count else np.nan,
                          f"{column}_chance": chance / count if count else np.nan, f"{column}_queries": float(count)})
        return found


#: the atlas table's columns of :func:`repeat_scores`
REPEAT_STATISTICS = tuple(f"{label.column}{suffix}" for label in COPYING_LABELS for suffix in ("", "_chance", "_queries"))
