"""Layouts of each head's joint query/key cloud: the methods (PCA, UMAP, t-SNE), the neighbour graph
they share, the per-head tasks that fill the run's projection cache through the one per-head executor
(:class:`qkviz.cluster.HeadRunner`: this process, local worker processes or a Dask cluster), and the
worker that makes a method's layouts in the background.
"""

from qkviz.projection.background import LayoutProgress, LayoutWorker, describe_seconds
from qkviz.projection.methods import Projection, project_points
from qkviz.projection.neighbors import NeighborGraph, neighbor_graph
from qkviz.projection.project_run import DEFAULT_METHODS, ProjectionSummary, project
from qkviz.projection.tasks import plan_specs, project_head, projection_runner, run_tasks

__all__ = ["DEFAULT_METHODS", "LayoutProgress", "LayoutWorker", "NeighborGraph", "Projection", "ProjectionSummary",
           "describe_seconds", "neighbor_graph", "plan_specs", "project", "project_head", "project_points",
           "projection_runner", "run_tasks"]
