"""Projecting heads on a Dask cluster: the same pure :func:`~qkviz.projection.tasks.project_head` tasks the
local pool runs, submitted through a ``distributed`` client (the cluster plumbing every per-head task shares
is :mod:`qkviz.cluster`).

Each worker writes its heads' cache entries itself, as a local worker does: under the head's lock (released
by the operating system if the worker dies), through a temporary file and a rename (a killed worker leaves no
entry that reads as complete, and the retry removes its temporary files). A task whose worker dies is run
again on another worker by the scheduler; a task that raises (the file system's ``OSError``: every other
error is recorded on the layout) is retried :data:`~qkviz.cluster.RETRIES` times.

Each task's key names its head, ``project-L3H4-<token>``, so Dask's dashboard shows which heads run where;
its progress page groups them all under ``project``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from qkviz.cluster import HeadTask, dask_client, parse_cluster, prepare_workers, submit_heads
from qkviz.projection.tasks import project_head
from qkviz.store.projections import ProjectionSpec
from qkviz.store.run import StoredRun

if TYPE_CHECKING:
    from qkviz.cluster import DaskClient

__all__ = ["DaskExecutor", "dask_client", "parse_cluster"]   # the last two: qkviz.cluster's, named here as before


class DaskExecutor:
    """Runs :func:`~qkviz.projection.tasks.project_head` on the workers of a Dask client (a
    :class:`~qkviz.projection.tasks.HeadExecutor`); every worker is checked to see ``run`` first."""

    def __init__(self, client: "DaskClient", run: StoredRun):
        self.client = client
        prepare_workers(client, run, "projecting")

    def project_heads(self, run_path: str, groups: list[list[ProjectionSpec]], wait: bool) -> Iterator[list[dict]]:
        """Submit one task per head group and yield its outcomes as each finishes; on leaving early, the tasks
        not finished are cancelled."""
        path = str(Path(run_path).absolute())   # the workers' working directory is not ours
        tasks = [HeadTask(group[0].layer, group[0].head, (path, group, wait)) for group in groups]
        for _, outcomes in submit_heads(self.client, "project", project_head, tasks,
                                        instead="project that head without --dask"):
            yield outcomes
