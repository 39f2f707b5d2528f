"""The neighbour graph of the attention-faithful layouts (``attn-tsne``, ``attn-umap``): who attends to whom.

t-SNE and UMAP keep the neighbourhoods of the graph they are given. Built from distances between the
aligned points, that graph is not the attention: near in the aligned space is not a large ``q . k``.
Here the graph is the attention itself. For one head, with its ``n`` queries and ``n`` keys over the
whole corpus as ``2n`` points (query ``t`` is point ``t``, key ``t`` is point ``n + t``):

* **attention term** -- each query links to its ``k`` strongest keys anywhere in the corpus by the
  logit ``l = scale * q . k`` (soft-capped where the model caps), weighted by a softmax over those
  ``k`` logits at ``temperature`` (1: the head's own sharpness); each key links to the ``k`` queries
  that score it highest, weighted the same way. Each point's attention links sum to 1.
* **sink cap** (off by default) -- a first-token or delimiter sink is among the strongest keys of
  nearly every query. A key whose incoming attention weight exceeds ``key_cap`` times the mean is
  scaled down to it (and reported in ``sinks``). ``bench/faithful.py`` found the cap costs partner
  recall (0.31 -> 0.24 at ``key_cap`` 5 on four MiniLM heads) and buys little trustworthiness, so the
  default keeps the sinks: on a sink head the queries gather around the first-token keys, which is
  what the head does.
* **hide first token** (``hide_first_token``, off by default) -- every sentence's first-token key is left
  out of the queries' candidate keys: each query's top ``k`` (and its softmax) is over the other keys,
  so a sink head's queries are placed by the keys they attend to besides the sink. The first-token keys
  keep their own links (their top ``k`` queries, their nearest keys). See ``docs/methods.md`` for what
  this does to a sink head's picture, measured.
* **same-kind term** -- with weight ``alpha``, each query links to its ``same_kind_k`` nearest
  queries and each key to its nearest keys in the aligned space (cosine), uniformly, so that similar
  tokens stay together where the attention alone says little.

The matrix is symmetrised, ``P = (A + A^T) / 2``, and normalised to sum to 1. The graph keeps its two terms
apart (:meth:`AttentionGraph.weighted`), each token's partners, and the head's queries, keys and rule, so that a
layout can choose its own ``alpha`` per head and measure the partner recall it keeps against the exact partners
(:mod:`qkviz.projection.recall_trade`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from qkviz.core.errors import QkvizError
from qkviz.projection.catalogue import Parameter
from qkviz.core.logit_rule import LogitRule
from qkviz.neighbours.top_k import nearest_cosine, top_logits
from qkviz.projection.neighbors import neighbor_graph

#: The parameters of :func:`attention_graph` that a layout method takes.
GRAPH_PARAMS = ("k", "alpha", "temperature", "same_kind_k", "key_cap", "hide_first_token", "exact_search")
#: Heads of up to this many tokens find every partner by an exact search; larger ones search inverted files
#: (:mod:`qkviz.neighbours.top_k`). At 9,123 tokens, head size 8, the inverted files found 93% of the exact top 10
#: and cut the graph from 1.6 s to 0.7 s a head for a layout recall within 4% of the exact graph's
#: (``bench/thousand_heads.py``, ``docs/methods.md``); the bundled MiniLM run (5,000 tokens) stays exact.
EXACT_SEARCH = 5_000


def graph_parameters(alpha: float, same_kind_k: int = 10) -> tuple[Parameter, ...]:
    """The graph's parameters as a layout method declares them (its own default ``alpha`` and ``same_kind_k``). From
    ``bench/faithful.py``'s sweep (4 MiniLM heads, 2 of them sink heads): any key_cap lowers partner recall (q->k
    0.26 uncapped, 0.10 at 5, 0.05 at 2) for at most +0.016 trustworthiness, which alpha buys more cheaply;
    temperatures above 1 and k = 20 lower recall; k = 5 is no better than 10."""
    return (
        Parameter("k", 10, "whole", "strongest partners per token in the graph", low=1),
        Parameter("alpha", alpha, "real", "weight of the same-kind term (nearest queries / keys)", low=0.0),
        Parameter("temperature", 1.0, "real", "softmax temperature over a token's partner logits (1: the "
                  "head's own)", low=0.0, low_open=True),
        Parameter("same_kind_k", same_kind_k, "whole", "nearest same-kind neighbours", low=1),
        Parameter("key_cap", float("inf"), "real", "cap on a key's incoming attention weight, in times the "
                  "mean (bench/faithful.py found that a cap costs recall)", low=1.0, infinite=True),
        Parameter("hide_first_token", False, "flag", "leave every sentence's first-token key out of the keys "
                  "a query links to, so a sink head's queries are placed by what they attend to besides the sink"),
        Parameter("exact_search", EXACT_SEARCH, "whole", "heads of up to this many tokens find every attention "
                  "partner and nearest neighbour exactly; larger heads search inverted files (faster; about 93 in "
                  "100 of the top k found)", low=0),
    )


@dataclass(frozen=True)
class AttentionGraph:
    """The symmetric affinity matrix ``[2n, 2n]`` at the graph's ``alpha`` (sums to 1), the keys whose share was
    capped, and what :meth:`weighted` remixes: the symmetrised attention and same-kind terms (each point's links of
    a term sum to 1 before symmetrising), each token's ``k`` partners (``query_partners``: each query's strongest
    keys; ``key_partners``: each key's strongest queries; token indices ``[n, k]``, strongest first; approximate past
    ``exact_search``), and the head's ``queries``, ``keys`` and ``rule`` they were found with."""

    matrix: sp.csr_matrix
    sinks: np.ndarray        # token indices of the capped keys, strongest first
    n_tokens: int
    attention_term: sp.csr_matrix | None = None
    same_kind_term: sp.csr_matrix | None = None
    query_partners: np.ndarray | None = None
    key_partners: np.ndarray | None = None
    alpha: float = 0.0       # the same-kind weight of ``matrix``
    queries: np.ndarray | None = None   # the head's vectors and rule the graph was built from (references, no copies):
    keys: np.ndarray | None = None      # what a layout's own recall probe finds each probed token's exact partners in
    rule: LogitRule | None = None

    def weighted(self, alpha: float) -> sp.csr_matrix:
        """The affinities with the same-kind term at weight ``alpha`` (``matrix`` is this at the graph's own)."""
        if self.attention_term is None or (alpha > 0 and self.same_kind_term is None):
            raise ValueError("this attention graph keeps no terms to weigh again; build it with alpha > 0")
        mixed = self.attention_term if alpha == 0 else self.attention_term + alpha * self.same_kind_term
        return sp.csr_matrix(mixed / mixed.sum())


def softmax_rows(logits: np.ndarray, temperature: float) -> np.ndarray:
    shifted = (logits - logits[:, :1]) / temperature     # rows are sorted: the first logit is the largest
    weights = np.exp(shifted)
    return weights / weights.sum(axis=1, keepdims=True)


def check_graph_params(n_tokens: int, k: int, alpha: float, temperature: float, same_kind_k: int,
                       key_cap: float, hide_first_token: bool = False, exact_search: int = EXACT_SEARCH) -> None:
    """One-line errors for parameters the graph cannot use."""
    if not 1 <= k <= n_tokens:
        raise QkvizError(f"k must be between 1 and the head's {n_tokens} tokens, got {k}")
    if not (np.isfinite(alpha) and alpha >= 0):
        raise QkvizError(f"alpha must be a finite number >= 0, got {alpha}")
    if not (np.isfinite(temperature) and temperature > 0):
        raise QkvizError(f"temperature must be a finite number > 0, got {temperature}")
    if same_kind_k < 1 or (alpha > 0 and same_kind_k >= n_tokens):
        raise QkvizError(f"same_kind_k must be between 1 and {n_tokens - 1}, got {same_kind_k}")
    if not key_cap >= 1:
        raise QkvizError(f"key_cap must be at least 1 (times the mean), got {key_cap}")
    if not isinstance(hide_first_token, (bool, np.bool_)):
        raise QkvizError(f"hide_first_token must be true or false, got {hide_first_token!r}")


def attention_graph(queries: np.ndarray, keys: np.ndarray, aligned: np.ndarray, rule: LogitRule, *, k: int = 10,
                    alpha: float = 0.5, temperature: float = 1.0, same_kind_k: int = 10, key_cap: float = float("inf"),
                    hide_first_token: bool = False, first_tokens: np.ndarray | None = None, exact_search: int = EXACT_SEARCH,
                    approximate: bool = False) -> AttentionGraph:
    """The attention-faithful affinities of one head (see the module docstring).

    ``queries`` and ``keys`` ``[n, d_head]`` are the head's vectors as they enter ``q . k`` (the logits
    come from them, under ``rule``: the content logit, since a query's partners are sought in every sentence);
    ``aligned`` ``[2n, d_head]`` is the joint aligned cloud (the same-kind term's space).
    ``first_tokens`` (token indices: each sentence's first token, the token table's ``position == 0``) is
    needed only with ``hide_first_token``: those keys are then left out of every query's candidate keys
    (its top ``k`` and their softmax are over the other keys, as AttentionViz's "hide first token"); they
    still link to their own top queries and to their nearest keys. A head of more than ``exact_search`` tokens
    (or any, with ``approximate``) is searched on inverted files (:mod:`qkviz.neighbours.top_k`): so is the whole
    head's graph a sampled layout is polished with (:func:`qkviz.projection.sampling.polish_tsne`)."""
    n = len(queries)
    check_graph_params(n, k, alpha, temperature, same_kind_k, key_cap, hide_first_token, exact_search)
    approximate = approximate or n > exact_search
    candidates = np.arange(n)
    if hide_first_token:
        if first_tokens is None:
            raise ValueError("hide_first_token needs first_tokens, the token indices of each sentence's first token")
        first = np.asarray(first_tokens, dtype=np.int64)
        if first.ndim != 1 or (len(first) and (first.min() < 0 or first.max() >= n)):
            raise ValueError(f"first_tokens must be token indices in [0, {n}), got shape {first.shape}")
        candidates = np.setdiff1d(candidates, first)
        if k > len(candidates):
            raise QkvizError(f"k must be at most the {len(candidates)} keys left once first tokens are hidden, got {k}")
    found, query_logits = top_logits(queries, keys[candidates], k, rule, approximate=approximate)
    key_of_query = candidates[found]
    query_of_key, key_logits = top_logits(keys, queries, k, rule, approximate=approximate)
    query_weights = softmax_rows(query_logits, temperature)          # [n, k], each row sums to 1
    key_weights = softmax_rows(key_logits, temperature)
    incoming = np.bincount(key_of_query.ravel(), weights=query_weights.ravel(), minlength=n)
    cap = key_cap * incoming.mean()
    capped = np.flatnonzero(incoming > cap)
    if len(capped):
        factor = np.ones(n)
        factor[capped] = cap / incoming[capped]
        query_weights = query_weights * factor[key_of_query]
    attention = _symmetric(np.concatenate([np.repeat(np.arange(n), k), np.repeat(np.arange(n, 2 * n), k)]),
                           np.concatenate([n + key_of_query.ravel(), query_of_key.ravel()]),
                           np.concatenate([query_weights.ravel(), key_weights.ravel()]), n)
    same_kind = None
    if alpha > 0:
        rows = np.concatenate([offset + np.repeat(np.arange(n), same_kind_k) for offset in (0, n)])
        columns = np.concatenate([offset + _same_kind(part, same_kind_k, approximate).ravel()
                                  for offset, part in ((0, aligned[:n]), (n, aligned[n:]))])
        same_kind = _symmetric(rows, columns, np.full(2 * n * same_kind_k, 1.0 / same_kind_k), n)
    sinks = capped[np.argsort(-incoming[capped], kind="stable")]
    graph = AttentionGraph(sp.csr_matrix((2 * n, 2 * n)), sinks.astype(np.int64), n, attention, same_kind,
                           key_of_query.astype(np.int64), query_of_key.astype(np.int64), queries=queries, keys=keys,
                           rule=rule)
    return replace(graph, matrix=graph.weighted(alpha), alpha=float(alpha))


def _symmetric(rows: np.ndarray, columns: np.ndarray, values: np.ndarray, n: int) -> sp.csr_matrix:
    """``(M + M^T) / 2`` of the ``[2n, 2n]`` matrix of these entries (repeated entries add up)."""
    matrix = sp.csr_matrix((values, (rows, columns)), shape=(2 * n, 2 * n))
    return sp.csr_matrix((matrix + matrix.T) / 2)


def _same_kind(points: np.ndarray, k: int, approximate: bool) -> np.ndarray:
    """int64 ``[n, k]``: each point's ``k`` nearest other points by cosine (exact, or by an inverted file)."""
    if not approximate:
        return neighbor_graph(points, k + 1, "cosine").indices[:, 1:]
    near = nearest_cosine(points, points, k + 1, approximate=True)
    own = near == np.arange(len(points))[:, None]
    # the point itself is (nearly always) its own nearest; where the search missed it, drop the last instead
    keep = np.where(own.any(axis=1, keepdims=True), ~own, np.arange(k + 1) < k)
    return near[keep].reshape(len(points), k)
