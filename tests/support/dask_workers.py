"""Real Dask clusters for the tests: a LocalCluster of worker processes, and workers in their own mount
namespace that cannot see a run (or see another run at its path)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from qkviz.cluster import FAST_MALLOC


@contextlib.contextmanager
def local_cluster(workers: int):
    """A LocalCluster of worker processes, one thread each; without Dask's MALLOC_TRIM_THRESHOLD_, which its nanny
    would also leave in this process's environment, for every process a later test starts."""
    import dask
    import distributed

    with dask.config.set({FAST_MALLOC: None}), \
            distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                     dashboard_address=":0") as cluster:
        yield cluster


@contextlib.contextmanager
def module_client(module):
    """A client of two worker processes with one thread each, for a test ``module`` whose functions the workers
    run (pickled by value: the workers cannot import a test module)."""
    import cloudpickle
    import distributed

    cloudpickle.register_pickle_by_value(module)
    try:
        with local_cluster(2) as cluster, distributed.Client(cluster) as connected:
            yield connected
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def namespaces_work() -> bool:
    """Whether this machine lets a user make user and mount namespaces (``unshare -rm``)."""
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def worker_with_its_own_view(scheduler: str, name: str, directory: Path, other_run: Path | None) -> subprocess.Popen:
    """A Dask worker in its own mount namespace, where ``directory`` is an empty file system (the run is on
    this machine's disk, not on a share it mounts), or one holding a copy of ``other_run`` (a stale copy)."""
    script = 'mount -t tmpfs qkviz-test "$1" && { [ -z "$2" ] || cp -R "$2"/. "$1"/; } && shift 3 && exec "$@"'
    command = ["unshare", "-rm", "sh", "-c", script, "sh", str(directory), str(other_run or ""), "--",
               sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--nthreads", "1", "--no-nanny",
               "--name", name, "--dashboard-address", "127.0.0.1:0"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def blind_workers(run_path: Path, other_run: Path):
    """A LocalCluster of one worker that sees the run, and two that do not: ``hidden`` (an empty file system
    at the run's path) and ``stale`` (another run there); yields (client, {worker name: address})."""
    import distributed

    with local_cluster(1) as cluster, distributed.Client(cluster) as connected:
        workers = [worker_with_its_own_view(cluster.scheduler_address, "hidden", run_path, None),
                   worker_with_its_own_view(cluster.scheduler_address, "stale", run_path, other_run)]
        try:
            connected.wait_for_workers(3, timeout=60)
            yield connected, {info["name"]: address for address, info in connected.scheduler_info()["workers"].items()}
        finally:
            for worker in workers:
                worker.terminate()
                worker.wait(timeout=30)
