"""``attn-tsne``, the default layout: t-SNE whose affinities are the head's attention graph
(:mod:`qkviz.projection.attention_graph`: each token's strongest partners by ``scale * q . k`` over the corpus,
plus a same-kind term), so that near in the picture means strong attention. ``bench/faithful.py`` found it keeps
5-40x more of each token's attention partners than t-SNE, in less time per head.

Each 2D layout chooses its own same-kind weight (:mod:`qkviz.projection.recall_trade`): starting at ``alpha``, it
doubles the weight while the partner recall it measures on itself stays at least ``recall_target``, so a head with
recall to spare keeps more of the aligned space, and halves it (at most ``lower_steps`` times) on a head whose recall
is below ``recall_floor`` (``bench/faithful_ceiling.py``); ``--recall-target 0`` keeps ``alpha`` on every head. The
Student-t kernel's tails are heavier than t-SNE's (``dof`` 0.6, openTSNE's degrees of freedom): tighter groups of
partners and of similar tokens, which kept both a little more than ``dof`` 1 on the tuning heads. A 3D layout lifts
the 2D one and refines it at the starting ``alpha``.

A head past ``sample`` tokens is fitted on a stratified sample, spread over the whole head's attention graph and
polished on it (:mod:`qkviz.projection.sampling`) at the ``alpha`` the sample's layout chose: on MiniLM heads at
100,000 tokens a 10,000-token sample then scored as well as a 20,000-token one, in less time (``bench/scale.py``).
"""

from __future__ import annotations

from qkviz.projection.attention_graph import graph_parameters
from qkviz.projection.catalogue import FitInputs, Parameter, Projection, ProjectionMethod, register
from qkviz.projection.recall_trade import traded_tsne
from qkviz.projection.sampling import SAMPLED_PLACEMENT_VERSION, sample_parameter
from qkviz.projection.tsne_embedding import optimise, schedule

#: tokens a layout is fitted on when a head has more
SAMPLE = 10_000
#: The optimisation: shorter than ``tsne``'s 125 + 125 iterations and on a coarser FFT grid, so that a thousand heads
#: of 8,000 tokens are laid out in under half an hour on two cores. On 16 random heads of a 32 x 32-head model at
#: 9,123 tokens this (with the graph's inverted files past ``exact_search``) kept 98% of the partner recall of the
#: former full fit (125 + 125 iterations, openTSNE's grid, exact graph) in 40% of its CPU time; on 8 MiniLM heads 99%
#: (``bench/thousand_heads.py``, ``docs/methods.md``). The recall trade's steps add 40 iterations each.
SCHEDULE = {"early_exaggeration_iter": 40, "n_iter": 120, "fft_min_cells": 10, "fft_cell_width": 2.0}
#: the partner recall@10 a layout keeps while it trades the rest for the aligned space: the goal, 0.30, plus a margin
#: for the difference between the layout's own probe and another sample of the head's points
RECALL_TARGET = 0.33
#: a layout whose own recall is below this (the goal's bound) lowers alpha; between it and the target it keeps alpha
RECALL_FLOOR = 0.30
#: the same-kind weight a layout starts from, and the nearest same-kind neighbours that term links: on tuning heads
#: (``runs/atlas-*`` over data/sentences.txt, four MiniLM and four SmolLM2 heads drawn with seed 1) 30 neighbours at
#: weight 1 kept both partner recall and trustworthiness above 10 neighbours at 0.5, the former defaults
#: (``docs/methods.md``)
ALPHA, SAME_KIND_K = 1.0, 30
#: at most this many doublings of alpha (1 -> 8)
TRADE_STEPS = 3
#: at most this many halvings of alpha on a head below the recall floor (1 -> 0.5): a second cost the tuning heads
#: more trustworthiness than the recall it bought
LOWER_STEPS = 1
#: openTSNE's degrees of freedom of the Student-t kernel (1: t-SNE's Cauchy kernel; below 1: heavier tails)
DOF = 0.6


def fit(inputs: FitInputs) -> Projection:
    params = dict(inputs.params)
    if inputs.dim == 2:
        traded = traded_tsne(inputs.points, inputs.attention, inputs.seed, params)
        asked = inputs.attention.alpha
        adjusted = {} if traded.alpha == asked else {"alpha": (asked, traded.alpha)}
        return Projection(traded.coordinates, {**params, "alpha": traded.alpha}, adjusted, traded.embedding)
    from openTSNE import affinity

    affinities = affinity.PrecomputedAffinities(inputs.attention.matrix, normalize=True)
    coordinates, reference = optimise(inputs.points, inputs.dim, inputs.seed, params, affinities, inputs.start_2d)
    return Projection(coordinates, params, {}, reference)


TRADE_PARAMETERS = (
    Parameter("recall_target", RECALL_TARGET, "real", "2D: double alpha (at most trade-steps times) while the "
              "layout's own partner recall@10 stays at least this (0: keep alpha on every head)", low=0.0),
    Parameter("recall_floor", RECALL_FLOOR, "real", "2D: halve alpha (at most lower-steps times) only where the "
              "layout's own partner recall@10 is below this", low=0.0),
    Parameter("trade_steps", TRADE_STEPS, "whole", "2D: at most this many doublings of alpha", low=0),
    Parameter("lower_steps", LOWER_STEPS, "whole", "2D: on a head below the recall floor, at most this many "
              "halvings of alpha while they raise its recall", low=0),
    Parameter("dof", DOF, "real", "2D: degrees of freedom of the t-SNE kernel (1: t-SNE's; lower: heavier tails)",
              low=0.0, low_open=True),
)

register(ProjectionMethod(
    name="attn-tsne", label="attention t-SNE", fit=fit, rank=0, default_dims=(2,), uses_attention=True,
    refines_2d=True, polish_version=SAMPLED_PLACEMENT_VERSION,
    summary="t-SNE over the head's attention graph: near means strong attention",
    parameters=(*graph_parameters(alpha=ALPHA, same_kind_k=SAME_KIND_K), *schedule(**SCHEDULE), *TRADE_PARAMETERS,
                sample_parameter(SAMPLE))))
