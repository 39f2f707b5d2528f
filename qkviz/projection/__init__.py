"""Layouts of each head's joint query/key cloud: the methods (PCA, UMAP, t-SNE), the neighbour graph
they share, the per-head tasks that fill the run's projection cache through an executor (local processes
or a Dask cluster), and the worker that makes a method's layouts in the background.
"""

from qkviz.projection.background import LayoutProgress, LayoutWorker, describe_seconds
from qkviz.projection.dask_executor import DaskExecutor, dask_client, parse_cluster
from qkviz.projection.methods import Projection, project_points
from qkviz.projection.neighbors import NeighborGraph, neighbor_graph
from qkviz.projection.project_run import DEFAULT_METHODS, ProjectionSummary, project
from qkviz.projection.tasks import local_executor, plan_specs, project_head, run_tasks

__all__ = ["DEFAULT_METHODS", "DaskExecutor", "LayoutProgress", "LayoutWorker", "NeighborGraph", "Projection",
           "ProjectionSummary", "dask_client", "describe_seconds", "local_executor", "neighbor_graph", "parse_cluster",
           "plan_specs", "project", "project_head", "project_points", "run_tasks"]
