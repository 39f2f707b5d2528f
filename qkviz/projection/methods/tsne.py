"""``tsne``: openTSNE over the aligned points' nearest neighbours (cosine, as AttentionViz), perplexity 30.
A perplexity too large for a head's points is reduced, and the reduction recorded."""

from __future__ import annotations

from qkviz.projection.catalogue import FitInputs, Parameter, Projection, ProjectionMethod, register
from qkviz.projection.neighbors import METRIC, NeighborGraph, neighbor_graph
from qkviz.projection.sampling import DEFAULT_SAMPLE, sample_parameter
from qkviz.projection.tsne_embedding import optimise, schedule


def fitting_perplexity(perplexity: float, n_points: int) -> float:
    return float(min(perplexity, (n_points - 1) / 3))


def neighbours_needed(params: dict, n_points: int) -> int:
    return min(int(3 * fitting_perplexity(params["perplexity"], n_points)), n_points - 1) + 1


def fit(inputs: FitInputs) -> Projection:
    from openTSNE import affinity
    from openTSNE.nearest_neighbors import PrecomputedNeighbors

    n_points, used, adjusted = len(inputs.points), dict(inputs.params), {}
    needed = neighbours_needed(used, n_points)
    graph: NeighborGraph | None = inputs.neighbours
    if graph is None or graph.k < needed or graph.metric != used["metric"]:
        graph = neighbor_graph(inputs.points, needed, used["metric"])
    graph = graph.first(needed)
    fitting = fitting_perplexity(used["perplexity"], n_points)
    if fitting != used["perplexity"]:
        adjusted["perplexity"] = (used["perplexity"], fitting)
        used["perplexity"] = fitting
    affinities = affinity.PerplexityBasedNN(
        perplexity=used["perplexity"], knn_index=PrecomputedNeighbors(graph.indices[:, 1:], graph.distances[:, 1:]),
        n_jobs=1, random_state=inputs.seed)
    coordinates, reference = optimise(inputs.points, inputs.dim, inputs.seed, used, affinities, inputs.start_2d)
    return Projection(coordinates, used, adjusted, reference)


register(ProjectionMethod(
    name="tsne", label="t-SNE", fit=fit, rank=10, default_dims=(2,), refines_2d=True,
    summary="openTSNE over the aligned points' nearest neighbours", neighbours_needed=neighbours_needed,
    parameters=(Parameter("perplexity", 30.0, "real", "t-SNE perplexity", low=0.0, low_open=True), METRIC,
                *schedule(), sample_parameter(DEFAULT_SAMPLE))))
