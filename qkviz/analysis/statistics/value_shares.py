"""What a head moves rather than where it looks (Kobayashi et al. 2020), for the head atlas: the value-weighted shares
of the first and the special tokens, on runs with output norms (:attr:`qkviz.store.StoredRun.has_output_norms`).

With ``n_j = |W_O^h v_j|`` the key's output norm and ``a`` the head's attention (:mod:`qkviz.analysis.statistics.head_stats`):

* ``first_token_value_share``: the mean over queries of ``a[x, i, 0] n_0 / sum_j a[x, i, j] n_j``, the first
  token's share of what the query receives through the head; ``special_value_share`` likewise over special keys;
* ``first_token_transmits`` = ``first_token_value_share / first_token_attention`` and ``special_transmits`` =
  ``special_value_share / special_attention``: 1 where the token moves as much as its attention says, near 0 for a
  sink that moves nothing (a short value), above 1 for one that moves more; NaN where the attention is below
  :data:`TRANSMIT_FLOOR` (nothing to compare).
"""

from __future__ import annotations

import numpy as np

from qkviz.analysis.statistics.attention_batches import SentenceBatch
from qkviz.analysis.statistics.registry import OUTPUT_NORMS, statistic_names

#: the value-weighted share of the first and special tokens, and its ratio to their attention share
VALUE_STATISTICS = statistic_names(OUTPUT_NORMS)
#: the attention share below which a ``*_transmits`` ratio is NaN
TRANSMIT_FLOOR = 1e-4


class ValueShares:
    """One head's value-weighted shares, batch by batch; :meth:`values` gives :data:`VALUE_STATISTICS`."""

    def __init__(self, norms: np.ndarray, special: np.ndarray):
        """``norms``: the head's output norm of every token of the run; ``special``: bool, every token's."""
        self.norms, self.special = norms, special
        self.queries = self.first = self.special_share = 0.0

    def add(self, batch: SentenceBatch, probs: np.ndarray, mask: np.ndarray) -> None:
        rows = np.maximum(batch.rows, 0)
        moved = np.where(batch.valid, self.norms[rows], 0.0)                  # [batch, key]
        special = self.special[rows] & batch.valid
        total = np.einsum("bqk,bk->bq", probs, moved)
        received = mask.any(axis=2) & (total > 0)
        self.queries += received.sum()
        share = np.where(received, total, 1.0)
        self.first += float((probs[:, :, 0] * moved[:, :1] / share)[received].sum())
        special_moved = np.einsum("bqk,bk->bq", probs, np.where(special, moved, 0.0))
        self.special_share += float((special_moved / share)[received].sum())

    def values(self, attention: dict[str, float]) -> dict[str, float]:
        """:data:`VALUE_STATISTICS`, beside the attention shares in ``attention`` (``first_token_attention``,
        ``special_attention``)."""
        queries = max(self.queries, 1.0)
        first, special = self.first / queries, self.special_share / queries
        return {"first_token_value_share": first, "special_value_share": special,
                "first_token_transmits": transmits(first, attention["first_token_attention"]),
                "special_transmits": transmits(special, attention["special_attention"])}


def transmits(moved: float, attended: float) -> float:
    """The value-weighted share over the attention share, NaN below :data:`TRANSMIT_FLOOR`."""
    return moved / attended if attended >= TRANSMIT_FLOOR else float("nan")
