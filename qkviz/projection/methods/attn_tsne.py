"""``attn-tsne``, the default layout: t-SNE whose affinities are the head's attention graph
(:mod:`qkviz.projection.attention_graph`: each token's strongest partners by ``scale * q . k`` over the corpus,
plus a same-kind term), so that near in the picture means strong attention. ``bench/faithful.py`` found it keeps
5-40x more of each token's attention partners than t-SNE, in less time per head.

A head past ``sample`` tokens is fitted on a stratified sample, spread over the whole head's attention graph and
polished on it (:mod:`qkviz.projection.sampling`): on MiniLM heads at 100,000 tokens a 10,000-token sample then
scored as well as a 20,000-token one, in less time (``bench/scale.py``).
"""

from __future__ import annotations

from qkviz.projection.attention_graph import graph_parameters
from qkviz.projection.catalogue import FitInputs, Projection, ProjectionMethod, register
from qkviz.projection.sampling import SAMPLED_PLACEMENT_VERSION, sample_parameter
from qkviz.projection.tsne_embedding import optimise, schedule

#: tokens a layout is fitted on when a head has more
SAMPLE = 10_000
#: The optimisation: shorter than ``tsne``'s 125 + 125 iterations and on a coarser FFT grid, so that a thousand heads
#: of 8,000 tokens are laid out in under half an hour on two cores. On 16 random heads of a 32 x 32-head model at
#: 9,123 tokens this (with the graph's inverted files past ``exact_search``) kept 98% of the partner recall of the
#: former full fit (125 + 125 iterations, openTSNE's grid, exact graph) in 40% of its CPU time; on 8 MiniLM heads 99%
#: (``bench/thousand_heads.py``, ``docs/methods.md``).
SCHEDULE = {"early_exaggeration_iter": 40, "n_iter": 120, "fft_min_cells": 10, "fft_cell_width": 2.0}


def fit(inputs: FitInputs) -> Projection:
    from openTSNE import affinity

    affinities = affinity.PrecomputedAffinities(inputs.attention.matrix, normalize=True)
    coordinates, reference = optimise(inputs.points, inputs.dim, inputs.seed, inputs.params, affinities,
                                      inputs.start_2d)
    return Projection(coordinates, dict(inputs.params), {}, reference)


register(ProjectionMethod(
    name="attn-tsne", label="attention t-SNE", fit=fit, rank=0, default_dims=(2,), uses_attention=True,
    refines_2d=True, polish_version=SAMPLED_PLACEMENT_VERSION,
    summary="t-SNE over the head's attention graph: near means strong attention",
    parameters=(*graph_parameters(alpha=0.5), *schedule(**SCHEDULE), sample_parameter(SAMPLE))))
