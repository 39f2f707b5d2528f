"""Per-head tasks on a Dask cluster: naming and reaching it, checking its workers see the run, submitting.

``dask`` and ``distributed`` (the ``dask`` extra) are imported here only, and only when a cluster is asked
for. The run must lie on storage every worker sees at the same path: :func:`prepare_workers` checks that on
every worker before anything is submitted. A task whose worker dies is run again on another worker by the
scheduler (up to its ``distributed.scheduler.allowed-failures``, 3 by default); a task that raises is retried
:data:`RETRIES` times. Whatever a task writes it writes through a temporary file and a rename, so a killed
worker leaves no file that reads as complete.

Each task's key names its head, ``<what>-L3H4-<token>`` (``project``, ``stats``, ``index``), so Dask's
dashboard shows which heads run where; its progress page groups them under ``<what>``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from qkviz.core.errors import QkvizError
from qkviz.store.manifest import read_manifest
from qkviz.store.run import StoredRun

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


@dataclass(frozen=True)
class HeadTask:
    """One head's task: ``function(*args)`` (a pure function of the run's path and the head's parameters)."""

    layer: int
    head: int
    args: tuple


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
def dask_client(cluster: str, connect_timeout: float | None = None) -> Iterator["Client"]:
    """A Dask client of ``cluster`` (see :func:`parse_cluster`), closed at the end.

    ``tcp://host:port`` connects to a running scheduler (a one-line :class:`QkvizError` if none answers
    within ``connect_timeout`` seconds, default :data:`CONNECT_TIMEOUT`); ``local:N`` starts a
    ``LocalCluster`` of N worker processes with one thread each, shut down at the end, and without Dask's
    default ``MALLOC_TRIM_THRESHOLD_`` (see :data:`FAST_MALLOC`)."""
    where = parse_cluster(cluster)
    connect_timeout = CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
    distributed = import_distributed()
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


def prepare_workers(client: "Client", run: StoredRun, doing: str) -> int:
    """Check that every worker sees ``run`` (:func:`check_workers_see_run`), log where the dashboard is and
    warn about workers that run with Dask's ``MALLOC_TRIM_THRESHOLD_``; returns the number of workers."""
    workers = check_workers_see_run(client, run)
    logger.info("%s on %d Dask workers; dashboard: %s", doing, workers, client.dashboard_link)
    trimming = [worker for worker, value in client.run(malloc_trim_threshold).items() if value is not None]
    if trimming:
        logger.warning("%d of %d Dask workers run with MALLOC_TRIM_THRESHOLD_ set (Dask's default), which made "
                       "projection about 2x slower: start them with %s set to null", len(trimming), workers,
                       FAST_MALLOC)
    return workers


def submit_heads(client: "Client", what: str, function: Callable, tasks: Sequence[HeadTask],
                 instead: str) -> Iterator[tuple[int, Any]]:
    """Submit ``function(*task.args)`` for every task (key ``<what>-L<layer>H<head>-<token>``, retried
    :data:`RETRIES` times) and yield ``(its number in tasks, its result)`` as each finishes; on leaving early,
    the tasks not finished are cancelled. A task that ended every worker that ran it (``KilledWorker``) is one
    :class:`QkvizError` line ending with what to do ``instead``."""
    distributed = import_distributed()
    futures = [client.submit(function, *task.args, key=head_task_key(what, task.layer, task.head), retries=RETRIES)
               for task in tasks]
    numbers = {future.key: number for number, future in enumerate(futures)}
    try:
        for future in distributed.as_completed(futures):
            number = numbers[future.key]
            try:
                yield number, future.result()
            except distributed.KilledWorker:
                task = tasks[number]
                raise QkvizError(f"layer {task.layer} head {task.head}'s {what} task ended every Dask worker that "
                                 f"ran it (out of memory?): give the workers more memory, or {instead}") from None
    finally:
        unfinished = [future for future in futures if not future.done()]
        if unfinished:
            client.cancel(unfinished)


def head_task_key(what: str, layer: int, head: int) -> str:
    """The Dask key of one head's task: ``<what>-L<layer>H<head>-<unique token>``."""
    return f"{what}-L{layer}H{head}-{uuid.uuid4().hex}"


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


def import_distributed():
    """The ``distributed`` package, or a one-line :class:`QkvizError` naming the extra to install."""
    try:
        import distributed
    except ImportError as error:
        raise QkvizError(f"running on Dask needs the dask extra ({error.name} is missing): "
                         "pip install 'qkviz[dask]'") from None
    return distributed
