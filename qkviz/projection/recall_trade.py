"""Each head's own trade between partner recall and the aligned space: how ``attn-tsne`` chooses its same-kind
weight ``alpha`` per head.

More same-kind weight keeps the aligned space's neighbourhoods (trustworthiness) and costs partner recall, at a
rate no fixed weight suits on every head: some heads keep recall 0.45 at the default weight and can give much of
it for the aligned space, others fall short of 0.30 unless the weight is lowered (``bench/faithful_ceiling.py``).
So the layout measures what it keeps and moves its weight itself, in either direction:

1. it is fitted at the graph's own ``alpha`` (early exaggeration, then ``n_iter`` iterations);
2. it measures its own partner recall@k on a seeded probe of its points (:class:`RecallProbe`: the queries and keys
   of 500 tokens, their exact ``k`` partners over the whole head, ties counted, against their nearest points of the
   other kind in the layout: the measure the benches judge);
3. **with recall to spare** (at least ``recall_target``), while steps are left (``trade_steps``), it doubles
   ``alpha`` and goes on for :data:`STEP_ITER` iterations from where it is (the optimiser's state kept), measuring
   again; the first step whose recall falls below the target is dropped and the layout before it kept;
4. **short of the goal** (below ``recall_floor``), it halves ``alpha`` the same way, at most ``lower_steps`` times,
   while that raises its recall, and stops at the first step that reaches the target; a step that does not raise the
   recall is dropped. Between the floor and the target it keeps ``alpha``: the margin that guards a doubling against
   another sample's noise would, on the way down, spend trustworthiness on recall the head already has.

Each step costs :data:`STEP_ITER` iterations (a third of the fit's); the probe costs milliseconds. Everything is
seeded: the same head, seed and settings give the same layout and ``alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkviz.neighbours.partner_recall import PartnerSample, layout_recall, partner_sample
from qkviz.projection.tsne_embedding import fft_grid

#: iterations after each doubling of ``alpha``: enough for the layout to settle into the new weights from where it is
STEP_ITER = 40
#: tokens whose queries and keys the layout's own recall is measured on
PROBE_SIZE = 500
#: the probe's points are drawn with ``default_rng(seed + PROBE_SEED)``: not the points a bench samples with ``seed``
PROBE_SEED = 7_919


@dataclass(frozen=True)
class RecallProbe:
    """A seeded sample of a head's tokens (their queries and keys) with each one's ``k``-th best logit over the whole
    head, found exactly (:class:`~qkviz.neighbours.partner_recall.PartnerSample`): the recall a layout keeps of them
    (:meth:`recall`) is measured as the benches measure it -- exact partners, ties counted -- not on the graph's own
    partners, which past ``exact_search`` tokens an inverted file found (about 93 in 100 of them) and which made the
    probe read higher than the layout's true recall on some heads."""

    sample: PartnerSample

    @classmethod
    def of(cls, graph, seed: int, size: int = PROBE_SIZE) -> "RecallProbe":
        if graph.queries is None or graph.keys is None or graph.rule is None:
            raise ValueError("the recall probe needs the attention graph's queries, keys and rule")
        k = graph.query_partners.shape[1]
        return cls(partner_sample(graph.queries, graph.keys, graph.rule, k, size, seed + PROBE_SEED))

    def recall(self, layout: np.ndarray) -> float:
        """Partner recall@k of ``layout`` ``[2n, 2]`` (queries first) on the probe: the mean of the query-to-key and
        key-to-query shares of partners among each probed point's ``k`` nearest points of the other kind."""
        shares = layout_recall(self.sample, np.asarray(layout, dtype=np.float64))
        return float((shares["query"] + shares["key"]) / 2)


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
    spare = tried[0][1] >= target
    short = tried[0][1] < float(params["recall_floor"])
    factor, steps = (2.0, int(params["trade_steps"])) if spare else (0.5, int(params["lower_steps"]) if short else 0)
    for _ in range(steps if target > 0 and alpha > 0 else 0):
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
