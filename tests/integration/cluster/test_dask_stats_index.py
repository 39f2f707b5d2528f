"""The head atlas and the search indexes on a real Dask cluster (``LocalCluster`` of worker processes): the
same results as this process and the local pool, a worker killed mid-task retried with nothing half-written
left, and the ``--dask`` options' bad input (a bad address, no scheduler, workers that cannot see the run) one
line and exit status 2."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import qkviz
from qkviz.analysis.atlas.head_atlas import load_atlas
from qkviz.cli import main
from qkviz.search import PartnerIndexes, index_targets
from qkviz.store.files import ATLAS_DIRECTORY, ATLAS_MARKER
from support.dask_workers import blind_workers, module_client, namespaces_work

pytest.importorskip("distributed", reason="the dask extra is not installed")   # with dask and cloudpickle


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of two worker processes (one thread each) that every test of the module shares."""
    with module_client(sys.modules[__name__]) as connected:
        yield connected


@pytest.fixture(scope="module")
def atlas_run(tiny_run):
    """An absolute-position decoder extracted with head updates: every part of the atlas is made (the first
    layer's embedding profiles, the update histograms)."""
    return tiny_run("gpt2", max_sentences=8, head_update=True)


def _copy(run, destination: Path):
    return qkviz.open_run(shutil.copytree(run.path, destination, ignore=shutil.ignore_patterns(ATLAS_DIRECTORY, "indexes")))


def assert_same_atlas(found, expected):
    pd.testing.assert_frame_equal(found.table, expected.table, check_exact=True)
    pd.testing.assert_frame_equal(found.exemplars, expected.exemplars, check_exact=True)
    for name in ("relative_position", "term_profiles", "update_histograms", "embedding_profiles"):
        np.testing.assert_array_equal(getattr(found, name), getattr(expected, name), err_msg=name)
    assert found.terms == expected.terms and found.max_offset == expected.max_offset


def test_the_atlas_is_the_same_here_on_a_local_pool_and_on_dask(client, atlas_run, tmp_path):
    runs = {where: _copy(atlas_run, tmp_path / where) for where in ("serial", "jobs", "dask")}
    asked = dict(max_offset=8, exemplars=3, syntax=True, progress=False)
    serial = qkviz.compute_stats(runs["serial"], **asked)
    assert serial.update_histograms is not None and serial.embedding_profiles is not None
    assert serial.table.pos_NOUN.notna().all() and len(serial.table) == atlas_run.n_layers * atlas_run.n_heads
    assert_same_atlas(qkviz.compute_stats(runs["jobs"], jobs=2, **asked), serial)
    assert_same_atlas(qkviz.compute_stats(runs["dask"], client=client, **asked), serial)
    for run in runs.values():     # and what each stored reads back the same
        assert_same_atlas(load_atlas(run), serial)


def _index_files(run) -> dict[str, object]:
    """Every file of the run's indexes: the inverted files' arrays, and their sidecars without the build time."""
    found = {}
    for path in sorted((run.path / "indexes").iterdir()):
        if path.name.endswith(".npz"):
            with np.load(path) as stored:
                found[path.name] = {name: stored[name] for name in stored.files}
        elif path.suffix == ".json":
            sidecar = json.loads(path.read_text())
            sidecar["info"].pop("build_seconds")
            found[path.name] = {key: value for key, value in sidecar.items() if key != "sha256"}
        else:
            found[path.name] = path.read_bytes()
    return found


def assert_same_indexes(run, expected_run, limit: int, layers: list[int]):
    found, expected = _index_files(run), _index_files(expected_run)
    assert sorted(found) == sorted(expected)
    assert sum(name.endswith(".ivf.npz") for name in found) == len(layers) * (run.n_heads + run.n_kv_heads)
    for name, value in expected.items():
        if isinstance(value, dict) and name.endswith(".npz"):
            for array in value:
                np.testing.assert_array_equal(found[name][array], value[array], err_msg=name)
        else:
            assert found[name] == value, name
    here, there = PartnerIndexes(run, exact_limit=limit), PartnerIndexes(expected_run, exact_limit=limit)
    for layer, head, point in ((layers[0], 1, 3), (layers[-1], 3, 17), (layers[-1], 0, run.n_tokens + 5)):
        a, b = here.partners(layer, head, point, 5), there.partners(layer, head, point, 5)
        assert a.info.kind == "ivf" and np.array_equal(a.tokens, b.tokens) and np.array_equal(a.logits, b.logits)


def test_indexes_built_on_dask_equal_the_local_ones(client, tiny_run, tmp_path):
    source = tiny_run("llama")
    local, remote = _copy(source, tmp_path / "local"), _copy(source, tmp_path / "dask")
    limit = source.n_tokens // 2         # past it: every head's inverted files are really built
    qkviz.build_indexes(local, exact_limit=limit, progress=False)
    summary = qkviz.build_indexes(remote, exact_limit=limit, progress=False, client=client)
    assert summary.n_indexes == len(index_targets(remote, list(range(remote.n_layers)), list(range(remote.n_heads))))
    assert len(summary.recalls) == summary.n_indexes
    assert_same_indexes(remote, local, limit, list(range(source.n_layers)))


def _die_in(marker: str, module: str, name: str) -> None:
    """Installed on every worker: the first call of ``module.name`` anywhere in the cluster ends its worker
    (SIGKILL, as the kernel's out-of-memory killer sends); for ``numpy.savez`` after writing part of the file,
    as a write cut short leaves it. ``marker`` records where it died."""
    import importlib

    owner = importlib.import_module(module)
    real = getattr(getattr(owner, name), "real", getattr(owner, name))

    def dying(*args, **kwargs):
        try:
            descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:        # the kill happened already (on this worker or the other)
            return real(*args, **kwargs)
        target = args[0]
        os.write(descriptor, str(getattr(target, "name", target)).encode())
        os.close(descriptor)
        if hasattr(target, "write"):
            target.write(b"PK\x03\x04partial")   # the start of a zip file: what a write cut short leaves
            target.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    dying.real = real
    setattr(owner, name, dying)


def _stop_dying(module: str, name: str) -> None:
    import importlib

    owner = importlib.import_module(module)
    setattr(owner, name, getattr(getattr(owner, name), "real", getattr(owner, name)))


@pytest.mark.parametrize("what", ["stats", "index"])
def test_a_worker_killed_mid_task_is_retried_and_leaves_nothing_half_written(what, client, tiny_run, tmp_path):
    source = tiny_run("llama")
    run, expected = _copy(source, tmp_path / "run"), _copy(source, tmp_path / "expected")
    marker = tmp_path / "killed"
    hook = ("qkviz.analysis.atlas.atlas_tasks", "head_statistics") if what == "stats" else ("numpy", "savez")
    limit = source.n_tokens // 2
    workers_before = set(client.scheduler_info()["workers"])
    client.run(_die_in, str(marker), *hook)
    try:
        if what == "stats":
            found = qkviz.compute_stats(run, max_offset=8, progress=False, client=client)
        else:
            qkviz.build_indexes(run, layers=[1], exact_limit=limit, progress=False, client=client)
    finally:
        client.run(_stop_dying, *hook)
    assert marker.exists(), "no worker was killed: the test did not test anything"
    if what == "stats":
        assert_same_atlas(found, qkviz.compute_stats(expected, max_offset=8, progress=False))
        assert_same_atlas(load_atlas(run), found)
    else:
        leftover = Path(marker.read_text())
        assert leftover.parent == run.path / "indexes" and leftover.name.endswith(".partial")
        assert not leftover.exists() and not list((run.path / "indexes").glob("*.partial"))
        qkviz.build_indexes(expected, layers=[1], exact_limit=limit, progress=False)
        assert_same_indexes(run, expected, limit, [1])
    client.wait_for_workers(2, timeout=60)    # the nanny restarted the killed worker
    assert set(client.scheduler_info()["workers"]) != workers_before


def test_bad_dask_options_of_stats_and_index_are_one_line(tiny_run, tmp_path, monkeypatch, capsys):
    from support.browser import free_port

    run = _copy(tiny_run("llama"), tmp_path / "run")
    commands = {"stats": ["stats", "--run", str(run.path)], "index": ["index", "--run", str(run.path)]}
    monkeypatch.setattr("qkviz.cluster.dask_cluster.CONNECT_TIMEOUT", 1.0)
    port = free_port()          # nothing listens there
    for command in commands.values():
        for cluster, message in (("127.0.0.1:8786", "is not a Dask cluster: give a scheduler's address"),
                                 ("local:0", "'local:0' asks for 0 local Dask workers"),
                                 (f"tcp://127.0.0.1:{port}",
                                  f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port} within 1 s")):
            assert main([*command, "--dask", cluster]) == 2
            error = capsys.readouterr().err
            assert message in error and error.count("\n") == 1 and "Traceback" not in error
    assert main([*commands["stats"], "--jobs", "2", "--dask", "local:1"]) == 2
    assert "give one or the other" in capsys.readouterr().err
    assert not (run.path / ATLAS_DIRECTORY).exists() and not (run.path / "indexes").exists()


@pytest.mark.skipif(not namespaces_work(), reason="no user and mount namespaces here (unshare -rm fails)")
def test_stats_and_index_refuse_workers_that_cannot_see_the_run(tiny_run, tmp_path, capsys):
    run, other = _copy(tiny_run("llama"), tmp_path / "run"), tiny_run("llama", max_sentences=6)
    capsys.readouterr()      # the extraction's progress
    with blind_workers(run.path, other.path) as (connected, names):
        address = connected.scheduler.address
        for command in (["stats", "--run", str(run.path)],
                        ["index", "--run", str(run.path), "--exact-limit", str(run.n_tokens // 2)]):
            assert main([*command, "--dask", address]) == 2
            error = capsys.readouterr().err
            assert error.startswith(f"qkviz: error: 2 of 3 Dask workers cannot see the run at {run.path}: ")
            assert error.count("\n") == 1 and f"{names['stale']} (a different run is at that path there)" in error
    assert not (run.path / ATLAS_DIRECTORY / ATLAS_MARKER).exists()
    assert not list((run.path / "indexes").glob("*.ivf.npz"))


def test_what_every_head_shares_is_built_once_per_process(tiny_run, tmp_path, monkeypatch):
    import qkviz.analysis.atlas.atlas_tasks as atlas_tasks

    run = _copy(tiny_run("llama"), tmp_path / "run")
    built = []
    real = atlas_tasks.sentence_batches
    monkeypatch.setattr(atlas_tasks, "sentence_batches", lambda *args: built.append(args) or real(*args))
    atlas = qkviz.compute_stats(run, max_offset=4, progress=False)
    assert len(atlas.table) == run.n_layers * run.n_heads > 1 and len(built) == 1
    assert atlas_tasks._STATES == {}       # and not kept once the atlas is made
