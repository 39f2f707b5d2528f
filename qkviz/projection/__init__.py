"""Layouts of each head's joint query/key cloud: the catalogue of methods (one module each in
:mod:`qkviz.projection.methods`: PCA, UMAP, t-SNE and the attention-faithful ones), the neighbour graph they
share, the per-head tasks that fill the run's projection cache through the one per-head executor
(:class:`qkviz.cluster.HeadRunner`: this process, local worker processes or a Dask cluster), reading a cached
layout (or making one head's on demand), and the worker that makes a method's layouts in the background.
"""

from qkviz.projection.background import LayoutProgress, LayoutWorker, describe_seconds
from qkviz.projection.catalogue import (FitInputs, Parameter, Projection, ProjectionMethod, command_line_options,
                                        layout_spec, method_label, method_labels, method_names, project_points,
                                        projection_method, projection_methods, register, resolve_params, unregister)
from qkviz.projection.defaults import BACKGROUND_METHOD, DEFAULT_METHODS, FIRST_METHOD, LAYOUT_METHOD
from qkviz.projection.layouts import (best_cached_method, cached_layout, default_method, has_layout, layout_counts,
                                      layout_failures, layout_file)
from qkviz.projection.neighbors import NeighborGraph, neighbor_graph
from qkviz.projection.on_demand import layout_on_demand, project_command
from qkviz.projection.project_run import ProjectionSummary, project
from qkviz.projection.tasks import plan_specs, project_head, projection_runner, run_tasks
from qkviz.projection.attention_graph import GRAPH_PARAMS, attention_graph

__all__ = ["BACKGROUND_METHOD", "DEFAULT_METHODS", "FIRST_METHOD", "FitInputs", "LAYOUT_METHOD", "LayoutProgress",
           "LayoutWorker", "NeighborGraph", "Parameter", "Projection", "ProjectionMethod", "ProjectionSummary",
           "best_cached_method", "cached_layout", "command_line_options", "default_method", "describe_seconds",
           "has_layout", "layout_counts", "layout_failures", "layout_file", "layout_on_demand", "layout_spec",
           "method_label", "method_labels", "method_names", "neighbor_graph", "plan_specs", "project",
           "project_command", "project_head", "project_points", "projection_method", "projection_methods",
           "projection_runner", "register", "resolve_params", "run_tasks", "unregister",
           "GRAPH_PARAMS", "attention_graph"]
