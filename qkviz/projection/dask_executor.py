"""Projecting heads on a Dask cluster: the same pure :func:`~qkviz.projection.tasks.project_head` tasks the
local pool runs, submitted through a ``distributed`` client.

``dask`` and ``distributed`` (the ``dask`` extra) are imported here only, and only when a cluster is asked
for. The run must lie on storage every worker sees at the same path: :class:`DaskExecutor` checks that on
every worker before it submits anything. Each worker writes its heads' cache entries itself, as a local
worker does: under the head's lock (released by the operating system if the worker dies), through a
temporary file and a rename (a killed worker leaves no entry that reads as complete, and the retry removes
its temporary files). A task whose worker dies is run again on another worker by the scheduler (up to its
``distributed.scheduler.allowed-failures``, 3 by default); a task that raises (the file system's
``OSError``: every other error is recorded on the layout) is retried :data:`RETRIES` times.

Each task's key names its head, ``project-L3H4-<token>``, so Dask's dashboard shows which heads run where;
its progress page groups them all under ``project``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from qkviz.core.errors import QkvizError
from qkviz.projection.tasks import project_head
from qkviz.store.projections import ProjectionSpec
from qkviz.store.run import StoredRun, read_manifest

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: times a task that raised is run again (a worker's death is retried by the scheduler itself)
RETRIES = 2
#: seconds to wait for a scheduler before saying it cannot be reached
CONNECT_TIMEOUT = 10.0
#: the most workers ``local:N`` starts: one per CPU, as the local pool (more processes than cores are slower)
MAX_LOCAL_WORKERS = os.cpu_count() or 1

#: Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also turns off glibc's adaptive mmap
#: threshold: every large numpy temporary is then a fresh mmap and its page faults. It made one attn-tsne head of
#: the 5k-token MiniLM run take 20-22 s instead of 10 s (bench/dask_projection.py); ``local:N`` unsets it.
FAST_MALLOC = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"

_SCHEDULER_ADDRESS = re.compile(r"^(tcp|tls)://[^\s/]+$")
_LOCAL_CLUSTER = re.compile(r"^local:(\d+)$")
_HOW_TO_SHARE = ("put the run on storage every worker mounts at the same path (an NFS or other shared file "
                 "system), or copy it there")


def parse_cluster(text: str) -> str | int:
    """The scheduler address of ``tcp://host:port`` or ``tls://host:port``, or the number of workers of
    ``local:N``; anything else is a :class:`QkvizError`."""
    text = text.strip()
    if _SCHEDULER_ADDRESS.match(text):
        return text
    local = _LOCAL_CLUSTER.match(text)
    if local and 1 <= int(local.group(1)) <= MAX_LOCAL_WORKERS:
        return int(local.group(1))
    if local:
        raise QkvizError(f"{text!r} asks for {int(local.group(1))} local Dask workers: use 1 to {MAX_LOCAL_WORKERS} "
                         f"(this machine's CPUs; more processes than cores are slower, not faster)")
    raise QkvizError(f"{text!r} is not a Dask cluster: give a scheduler's address (tcp://host:8786 or tls://...) or "
                     "local:N for N worker processes on this machine")


@contextlib.contextmanager
def dask_client(cluster: str, connect_timeout: float = CONNECT_TIMEOUT) -> Iterator["Client"]:
    """A Dask client of ``cluster`` (see :func:`parse_cluster`), closed at the end.

    ``tcp://host:port`` connects to a running scheduler (a one-line :class:`QkvizError` if none answers
    within ``connect_timeout`` seconds); ``local:N`` starts a ``LocalCluster`` of N worker processes with
    one thread each, shut down at the end, and without Dask's default ``MALLOC_TRIM_THRESHOLD_`` (see
    :data:`FAST_MALLOC`)."""
    where = parse_cluster(cluster)
    distributed = _import_distributed()
    if isinstance(where, int):
        import dask

        with dask.config.set({FAST_MALLOC: None}), \
                distributed.LocalCluster(n_workers=where, threads_per_worker=1, processes=True,
                                         dashboard_address=":0") as local, distributed.Client(local) as client:
            yield client
        return
    try:
        client = distributed.Client(where, timeout=connect_timeout)
    except (OSError, TimeoutError) as error:
        raise QkvizError(f"cannot reach the Dask scheduler at {where} within {connect_timeout:g} s ({error}); start "
                         "it ('dask scheduler') or check the address, the port and the network") from None
    with client:
        yield client


class DaskExecutor:
    """Runs :func:`~qkviz.projection.tasks.project_head` on the workers of a Dask client (a
    :class:`~qkviz.projection.tasks.HeadExecutor`); every worker is checked to see ``run`` first."""

    def __init__(self, client: "Client", run: StoredRun):
        self.client = client
        self.distributed = _import_distributed()
        workers = check_workers_see_run(client, run)
        logger.info("projecting on %d Dask workers; dashboard: %s", workers, client.dashboard_link)
        trimming = [worker for worker, value in client.run(malloc_trim_threshold).items() if value is not None]
        if trimming:
            logger.warning("%d of %d Dask workers run with MALLOC_TRIM_THRESHOLD_ set (Dask's default), which made "
                           "projection about 2x slower: start them with %s set to null", len(trimming), workers,
                           FAST_MALLOC)

    def project_heads(self, run_path: str, groups: list[list[ProjectionSpec]], wait: bool) -> Iterator[list[dict]]:
        """Submit one task per head group and yield its outcomes as each finishes; on leaving early, the tasks
        not finished are cancelled."""
        path = str(Path(run_path).absolute())   # the workers' working directory is not ours
        heads = {task_key(group): group for group in groups}
        futures = [self.client.submit(project_head, path, group, wait, key=key, retries=RETRIES)
                   for key, group in heads.items()]
        try:
            for future in self.distributed.as_completed(futures):
                try:
                    yield future.result()
                except self.distributed.KilledWorker:
                    spec = heads[future.key][0]
                    raise QkvizError(f"layer {spec.layer} head {spec.head}'s task ended every Dask worker that ran it "
                                     "(out of memory?): give the workers more memory, or project that head without "
                                     "--dask") from None
        finally:
            unfinished = [future for future in futures if not future.done()]
            if unfinished:
                self.client.cancel(unfinished)


def task_key(group: list[ProjectionSpec]) -> str:
    """The Dask key of one head's task: ``project-L<layer>H<head>-<unique token>``."""
    return f"project-L{group[0].layer}H{group[0].head}-{uuid.uuid4().hex}"


def check_workers_see_run(client: "Client", run: StoredRun) -> int:
    """Check that every worker of ``client`` sees ``run`` (the same run: its manifest's fingerprint) at the
    same absolute path; returns the number of workers, or raises one :class:`QkvizError` line naming the
    workers that do not and what to do."""
    path = str(Path(run.path).absolute())
    seen = client.run(run_fingerprint, path, on_error="return")
    if not seen:
        raise QkvizError(f"the Dask cluster at {client.scheduler.address} has no workers: start some "
                         f"('dask worker {client.scheduler.address}') and run again")
    problems = []
    for worker, found in sorted(seen.items()):
        if isinstance(found, BaseException):      # e.g. qkviz is not installed there
            problems.append(f"{worker} ({type(found).__name__}: {found})")
        elif "error" in found:
            problems.append(f"{worker} ({found['error']})")
        elif found["fingerprint"] != run.manifest["fingerprint"]:
            problems.append(f"{worker} (a different run is at that path there)")
    if problems:
        raise QkvizError(f"{len(problems)} of {len(seen)} Dask workers cannot see the run at {path}: "
                         f"{'; '.join(problems)}; {_HOW_TO_SHARE}, with qkviz installed on every worker")
    return len(seen)


def run_fingerprint(path: str) -> dict[str, str]:
    """On a worker: ``{"fingerprint": ...}`` of the complete run at ``path``, or ``{"error": why there is none}``."""
    try:
        return {"fingerprint": str(read_manifest(Path(path))["fingerprint"])}
    except (QkvizError, OSError, KeyError) as error:
        return {"error": str(error) or type(error).__name__}


def malloc_trim_threshold() -> str | None:
    """On a worker: its ``MALLOC_TRIM_THRESHOLD_`` environment variable (see :data:`FAST_MALLOC`)."""
    return os.environ.get("MALLOC_TRIM_THRESHOLD_")


def _import_distributed():
    try:
        import distributed
    except ImportError as error:
        raise QkvizError(f"running on Dask needs the dask extra ({error.name} is missing): "
                         "pip install 'qkviz[dask]'") from None
    return distributed
