"""Projection on a real Dask cluster (``LocalCluster`` of worker processes): the same layouts as the local
pool, a worker killed mid-write retried with nothing half-written left, the ``--dask`` option, and workers
that cannot see the run refused up front."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import qkviz
from qkviz.cli import main
from qkviz.cluster import parse_cluster
from qkviz.core.errors import QkvizError
from qkviz.store.files import CACHE_DIRECTORY
from qkviz.store.projections import ProjectionCache
from support.dask_workers import blind_workers, local_cluster, module_client, namespaces_work

dask = pytest.importorskip("dask", reason="the dask extra is not installed")
distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
cloudpickle = pytest.importorskip("cloudpickle")


@pytest.fixture(scope="module")
def client():
    """Two worker processes with one thread each, shared by the module (a cluster starts in seconds)."""
    with module_client(sys.modules[__name__]) as connected:
        yield connected


def _copy(run, destination: Path):
    shutil.copytree(run.path, destination, ignore=shutil.ignore_patterns(CACHE_DIRECTORY))
    return qkviz.open_run(destination)


def _cache(run) -> ProjectionCache:
    return ProjectionCache(run.path, run.manifest["fingerprint"])


def _leftovers(run) -> list[Path]:
    return sorted((run.path / CACHE_DIRECTORY).rglob(".*.tmp"))


def test_dask_layouts_equal_the_local_pools(client, tiny_run, tmp_path):
    source = tiny_run("llama")
    here, there = _copy(source, tmp_path / "local"), _copy(source, tmp_path / "dask")
    short = {"early_exaggeration_iter": 10, "n_iter": 10}    # quick t-SNEs: equality is the point, not quality
    asked = dict(methods=["pca", "tsne", "attn-tsne"], dims=[2], heads=[0, 1], seed=3, progress=False,
                 params={"tsne": short, "attn-tsne": short})
    local = qkviz.project(here, jobs=2, **asked)
    remote = qkviz.project(there, client=client, **asked)
    assert remote.computed == local.computed == 3 * 2 * source.n_layers and not remote.failed
    specs = _cache(there).specs()
    assert len(specs) == remote.computed
    for spec in specs:     # every method is a function of the points and the seed: equal to the bit
        np.testing.assert_array_equal(_cache(there).load(spec), _cache(here).load(spec), err_msg=str(spec))
    assert qkviz.project(there, client=client, **asked).cached == remote.computed   # nothing made twice


def _die_while_writing(marker: str) -> None:
    """Installed on every worker: the first cache array written anywhere in the cluster is cut short by its
    worker's death (SIGKILL, as the kernel's out-of-memory killer sends); ``marker`` records the temporary file
    it left."""
    import numpy

    real_save = getattr(numpy.save, "real_save", numpy.save)

    def save(file, array, *args, **kwargs):
        try:
            descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:        # the kill happened already (on this worker or the other)
            return real_save(file, array, *args, **kwargs)
        os.write(descriptor, file.name.encode())
        os.close(descriptor)
        file.write(b"\x93NUMPY\x01\x00")   # part of a header: what a write cut short leaves
        file.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    save.real_save = real_save
    numpy.save = save


def _stop_dying() -> None:
    import numpy

    numpy.save = getattr(numpy.save, "real_save", numpy.save)


def test_a_worker_killed_mid_write_is_retried_and_leaves_nothing_half_written(client, tiny_run, tmp_path):
    run = _copy(tiny_run("llama"), tmp_path / "run")
    marker = tmp_path / "killed"
    workers_before = set(client.scheduler_info()["workers"])
    client.run(_die_while_writing, str(marker))
    try:
        summary = qkviz.project(run, ["pca"], [2], client=client, progress=False)
    finally:
        client.run(_stop_dying)
    assert marker.exists(), "no worker was killed: the test did not test anything"
    leftover = Path(marker.read_text())
    assert leftover.parent == run.path / CACHE_DIRECTORY and leftover.name.endswith(".tmp")
    assert not leftover.exists() and _leftovers(run) == []    # the retry removed what the dead worker left
    assert summary.computed == run.n_layers * run.n_heads and not summary.failed
    specs = _cache(run).specs()
    assert len(specs) == summary.computed and all(_cache(run).contains(spec) for spec in specs)
    client.wait_for_workers(2, timeout=60)    # the nanny restarted the killed worker
    assert set(client.scheduler_info()["workers"]) != workers_before


def test_the_dask_option_end_to_end(tiny_run, tmp_path, capsys):
    run = _copy(tiny_run("llama"), tmp_path / "run")
    assert main(["-q", "project", "--run", str(run.path), "--method", "pca", "--dim", "2", "--heads", "0",
                 "--dask", "local:2"]) == 0
    assert len(list((run.path / CACHE_DIRECTORY).glob("*.npy"))) == run.n_layers


def test_bad_dask_options_are_one_line_errors(tiny_run, capsys):
    from support.browser import free_port

    path = str(tiny_run("llama").path)
    for cluster, message in (("local:0", "'local:0' asks for 0 local Dask workers"),
                             (f"local:{os.cpu_count() + 1}", "local Dask workers: use 1 to"),
                             ("127.0.0.1:8786", "is not a Dask cluster: give a scheduler's address"),
                             ("http://scheduler:8786", "is not a Dask cluster")):
        assert main(["project", "--run", path, "--method", "pca", "--dask", cluster]) == 2
        assert message in capsys.readouterr().err
    assert main(["project", "--run", path, "--method", "pca", "--jobs", "2", "--dask", "local:1"]) == 2
    assert "give one or the other" in capsys.readouterr().err
    port = free_port()          # nothing listens there: a ten-second connect timeout, then one line
    assert main(["project", "--run", path, "--method", "pca", "--dask", f"tcp://127.0.0.1:{port}"]) == 2
    error = capsys.readouterr().err
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port} within 10 s" in error
    assert error.count("\n") == 1 and "Traceback" not in error


def test_a_cluster_without_workers_is_one_line(tiny_run):
    with local_cluster(0) as cluster, distributed.Client(cluster) as connected:
        with pytest.raises(QkvizError, match=f"the Dask cluster at {cluster.scheduler_address} has no workers: "
                                             "start some"):
            qkviz.project(tiny_run("llama"), ["pca"], [2], client=connected, progress=False)


def test_cluster_addresses_are_parsed():
    assert parse_cluster(" tcp://scheduler:8786 ") == "tcp://scheduler:8786"
    assert parse_cluster("tls://10.0.0.5:8786") == "tls://10.0.0.5:8786"
    assert parse_cluster("local:1") == 1
    for bad in ("tcp://", "tcp://host/path", "local:", "local:-1", "local:two", "inproc://x", ""):
        with pytest.raises(QkvizError):
            parse_cluster(bad)


def test_qkviz_imports_no_dask_until_asked():
    code = ("import sys; import qkviz, qkviz.cli; "
            "assert not {'dask', 'distributed'} & set(sys.modules), sorted(m for m in sys.modules if 'dask' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


@pytest.mark.skipif(not namespaces_work(), reason="no user and mount namespaces here (unshare -rm fails)")
def test_workers_that_cannot_see_the_run_are_named_before_any_work(tiny_run, tmp_path):
    run, other = _copy(tiny_run("llama"), tmp_path / "run"), tiny_run("llama", max_sentences=6)
    with blind_workers(run.path, other.path) as (connected, names):
        with pytest.raises(QkvizError) as refused:
            qkviz.project(run, ["pca"], [2], client=connected, progress=False)
    message = str(refused.value)
    assert message.startswith(f"2 of 3 Dask workers cannot see the run at {run.path}: ") and "\n" not in message
    assert f"{names['hidden']} ({run.path} is not a complete qkviz run" in message
    assert f"{names['stale']} (a different run is at that path there)" in message
    assert names[0] not in message            # the LocalCluster's own worker sees it
    assert not (run.path / CACHE_DIRECTORY).exists() or not list((run.path / CACHE_DIRECTORY).glob("*.npy"))
