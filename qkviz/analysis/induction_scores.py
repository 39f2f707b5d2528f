"""Induction and previous-token scores of every head, from the run's own attention over repeated text.

A query at position ``p`` whose token and the token before it both occurred earlier, at ``p' - 1`` and ``p'``, can
predict its successor by copying the token that followed then: an **induction head** attends from ``p`` to
``p' + 1``. A **previous-token head** attends from ``p`` to ``p - 1``. Per head: ``induction`` is the mean
attention a query with such an earlier bigram pays to the tokens that followed it (0 where the run repeats
nothing); ``previous_token`` the mean attention every query past the first pays to the token before it. Both come
from the stored queries and keys, recomputed into attention (:meth:`qkviz.store.StoredRun.attention`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

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
    return pd.DataFrame(rows, columns=["layer", "head", "induction", "previous_token", "n_induction_queries"])
