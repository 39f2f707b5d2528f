"""Each head's own trade between partner recall and the aligned space: how ``attn-tsne`` chooses its same-kind
weight ``alpha`` per head.

More same-kind weight keeps the aligned space's neighbourhoods (trustworthiness) and costs partner recall, at a
rate no fixed weight suits on every head: some heads keep recall 0.45 at the default weight and can give much of
it for the aligned space, others fall short of 0.30 unless the weight is lowered (``bench/faithful_ceiling.py``).
So the layout measures what it keeps and moves its weight itself, in either direction:

1. it is fitted at the graph's own ``alpha`` (early exaggeration, then ``n_iter`` iterations);
2. it measures its own partner recall@k on a seeded probe of its points (:class:`RecallProbe`: 500 queries and
   500 keys, their ``k`` partners read from the graph, their nearest points of the other kind in the layout);
3. **with recall to spare** (at least ``recall_target``), while steps are left (``trade_steps``), it doubles
   ``alpha`` and goes on for :data:`STEP_ITER` iterations from where it is (the optimiser's state kept), measuring
   again; the first step whose recall falls below the target is dropped and the layout before it kept;
4. **short of the target**, it halves ``alpha`` the same way, at most ``lower_steps`` times, while that raises its
   recall, and stops at the first step that reaches the target; a step that does not raise the recall is dropped.

Each step costs :data:`STEP_ITER` iterations (a third of the fit's); the probe costs milliseconds. Everything is
seeded: the same head, seed and settings give the same layout and ``alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.projection.tsne_embedding import fft_grid

#: iterations after each doubling of ``alpha``: enough for the layout to settle into the new weights from where it is
STEP_ITER = 40
#: queries (and as many keys) the layout's own recall is measured on
PROBE_SIZE = 500
#: the probe's points are drawn with ``default_rng(seed + PROBE_SEED)``: not the points a bench samples with ``seed``
PROBE_SEED = 7_919


@dataclass(frozen=True)
class RecallProbe:
    """A seeded sample of a head's queries and keys with their partners (token indices ``[m, k]``): the recall a
    layout keeps of them (:meth:`recall`) is the one the trade reads."""

    queries: np.ndarray          # token indices of the probed queries
    keys: np.ndarray             # token indices of the probed keys
    query_partners: np.ndarray   # [m, k]: each probed query's strongest keys
    key_partners: np.ndarray     # [m, k]: each probed key's strongest queries
    n_tokens: int

    @classmethod
    def of(cls, graph, seed: int, size: int = PROBE_SIZE) -> "RecallProbe":
        n = graph.n_tokens
        rng = np.random.default_rng(seed + PROBE_SEED)
        queries, keys = (np.sort(rng.choice(n, size=min(size, n), replace=False)) for _ in range(2))
        return cls(queries, keys, graph.query_partners[queries], graph.key_partners[keys], n)

    def recall(self, layout: np.ndarray) -> float:
        """Partner recall@k of ``layout`` ``[2n, 2]`` (queries first) on the probe: the mean of the query-to-key and
        key-to-query shares of partners among each probed point's ``k`` nearest points of the other kind."""
        from scipy.spatial import cKDTree

        n, k = self.n_tokens, self.query_partners.shape[1]
        shares = []
        for own, partners, own_points, other_points in ((self.queries, self.query_partners, layout[:n], layout[n:]),
                                                        (self.keys, self.key_partners, layout[n:], layout[:n])):
            _, near = cKDTree(other_points).query(own_points[own], k=k)
            near = np.asarray(near).reshape(len(own), k)
            kept = (near[:, :, None] == partners[:, None, :]).any(axis=2)
            shares.append(kept.mean())
        return float(np.mean(shares))


@dataclass(frozen=True)
class TradedLayout:
    """The layout kept, openTSNE's embedding of it, the ``alpha`` it settled at, and the recall measured at each
    weight tried (``[(alpha, recall)]``, in order)."""

    coordinates: np.ndarray
    embedding: object
    alpha: float
    tried: list


def traded_tsne(points: np.ndarray, graph, seed: int, params: dict) -> TradedLayout:
    """A 2D ``attn-tsne`` layout whose same-kind weight is chosen for this head (the module docstring)."""
    from openTSNE import TSNEEmbedding, initialization

    alpha = graph.alpha
    start = initialization.pca(points, n_components=2, random_state=seed)
    embedding = TSNEEmbedding(start, _affinities(graph, alpha), negative_gradient_method="fft", n_jobs=1,
                              random_state=seed, dof=float(params["dof"]), **fft_grid(params))
    embedding = embedding.optimize(n_iter=params["early_exaggeration_iter"], exaggeration=12, momentum=0.5)
    embedding = embedding.optimize(n_iter=params["n_iter"], momentum=0.8)
    probe = RecallProbe.of(graph, seed)
    tried = [(alpha, probe.recall(np.asarray(embedding)))]
    target = float(params["recall_target"])
    if target <= 0 or alpha <= 0:
        return TradedLayout(np.asarray(embedding, dtype=np.float32), embedding, alpha, tried)
    spare = tried[0][1] >= target
    factor, steps = (2.0, int(params["trade_steps"])) if spare else (0.5, int(params["lower_steps"]))
    for _ in range(steps):
        stepped = TSNEEmbedding(np.copy(embedding), _affinities(graph, factor * alpha), random_state=seed,
                                optimizer=embedding.optimizer.copy(), **embedding.gradient_descent_params)
        stepped.optimize(n_iter=STEP_ITER, momentum=0.8, inplace=True)
        recall = probe.recall(np.asarray(stepped))
        tried.append((factor * alpha, recall))
        if (recall < target) if spare else (recall <= tried[-2][1]):
            break
        embedding, alpha = stepped, factor * alpha
        if not spare and recall >= target:
            break
    return TradedLayout(np.asarray(embedding, dtype=np.float32), embedding, alpha, tried)


def _affinities(graph, alpha: float):
    from openTSNE import affinity

    return affinity.PrecomputedAffinities(graph.weighted(alpha), normalize=True)
