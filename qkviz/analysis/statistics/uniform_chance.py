"""What a head attending uniformly would score: the chance level each atlas label is measured against.

A uniform head gives every key a query may attend to (its mask: causal, window, chunk) the same weight, ``1 / |A(i)|``.
Its mean attention at relative offset ``o`` is the mean of ``1 / |A(i)|`` over the queries that may attend to
``i + o`` (the relative-position profile's chance, :mod:`qkviz.analysis.statistics.head_stats`), and its mean attention to the
first token the mean over all queries of ``[0 in A(i)] / |A(i)|``; a positional label's chance is the offset's with the
first token left out (the mean over the queries whose key ``i + o`` is allowed and not the first token, as
:mod:`qkviz.analysis.labels.label_table` measures the head). All depend only on the corpus's sequence lengths and the
layer's mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from qkviz.core.attention import allowed_keys
from qkviz.core.logit_rule import LogitRule
from qkviz.store.run import StoredRun


@dataclass(frozen=True)
class UniformChance:
    """A uniform head's scores on one layer's mask over one corpus."""

    offsets: np.ndarray        # float64 [2 * max_offset + 1]: mean attention at each offset, -max_offset first
    first_token: float         # mean attention to the first token
    one_key: float             # mean over all queries of 1 / |A(i)|: one given key's share
    #: float64 [2 * max_offset + 1]: ``offsets`` over the queries whose key at the offset is not the first token
    offsets_no_first: np.ndarray | None = None


def uniform_chance(run: StoredRun, layer: int, max_offset: int) -> UniformChance:
    """The chance levels of layer ``layer``'s heads (its mask) over the run's sequences."""
    rule = run.logit_rule(layer, 0)
    lengths = tuple(tuple(int(value) for value in found)
                    for found in np.unique(run.sentences.n_tokens.to_numpy(np.int64), return_counts=True))
    return _chance(lengths, rule.causal, rule.window, rule.chunk, max_offset)


@lru_cache(maxsize=64)
def _chance(lengths: tuple[tuple[int, ...], tuple[int, ...]], causal: bool, window: int | None, chunk: int | None,
            max_offset: int) -> UniformChance:
    rule = LogitRule(scale=1.0, causal=causal, window=window, chunk=chunk)
    offsets = np.arange(-max_offset, max_offset + 1)
    sums, counts = np.zeros(len(offsets)), np.zeros(len(offsets))
    sums_rest, counts_rest = np.zeros(len(offsets)), np.zeros(len(offsets))
    first = one = queries = 0.0
    for length, number in zip(*lengths):
        position = np.arange(length)
        lo, hi = allowed_keys(position, length, rule)
        share = 1.0 / (hi - lo)
        target = position[None, :] + offsets[:, None]                       # [offset, query]
        allowed = (target >= lo[None, :]) & (target < hi[None, :])
        sums += number * (allowed * share[None, :]).sum(axis=1)
        counts += number * allowed.sum(axis=1)
        rest = allowed & (target > 0)
        sums_rest += number * (rest * share[None, :]).sum(axis=1)
        counts_rest += number * rest.sum(axis=1)
        first += number * float((share * (lo == 0)).sum())
        one += number * float(share.sum())
        queries += number * length
    profile = np.divide(sums, counts, out=np.full(len(offsets), np.nan), where=counts > 0)
    profile_rest = np.divide(sums_rest, counts_rest, out=np.full(len(offsets), np.nan), where=counts_rest > 0)
    return UniformChance(profile, first / max(queries, 1.0), one / max(queries, 1.0), profile_rest)
