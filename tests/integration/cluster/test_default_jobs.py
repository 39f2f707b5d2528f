"""Issue 53: with no ``jobs`` (no ``--jobs``), ``stats``, ``project`` and ``related`` use the cores this process may
use, and store exactly what one job stores (``stats`` then runs the model's probes on a thread while the workers
compute the heads' statistics); each pool worker runs one torch thread while this process keeps its own; small work
and a script without a ``__main__`` guard run their heads here instead of failing."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import qkviz
from qkviz.cluster import HeadRunner, HeadTask, job_count, resolve_jobs, usable_cores
from qkviz.core.errors import QkvizError
from qkviz.store.files import ATLAS_DIRECTORY, CACHE_DIRECTORY, RELATED_DIRECTORY
from qkviz.store.projections import ProjectionCache
from support.cli import one_line_error, run_main
from support.worker_threads import torch_threads

two_cores = pytest.mark.skipif(usable_cores() < 2, reason="a pool of workers needs two cores")


@pytest.fixture
def pools_for_any_work(monkeypatch):
    """The default starts workers even for the tiny runs' work (their estimate is far below a pool's start-up)."""
    monkeypatch.setattr(job_count, "POOL_START_SECONDS", -1.0)


def _copy(run, destination):
    kept = shutil.ignore_patterns(ATLAS_DIRECTORY, CACHE_DIRECTORY, RELATED_DIRECTORY, "indexes")
    return qkviz.open_run(shutil.copytree(run.path, destination, ignore=kept))


def test_the_default_is_the_cores_this_process_may_use():
    assert usable_cores() == len(os.sched_getaffinity(0))
    pinned = subprocess.run([sys.executable, "-c", "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
                             "from qkviz.cluster import resolve_jobs, usable_cores; "
                             "print(usable_cores(), resolve_jobs(None, None, 1e6))"],
                            capture_output=True, text=True, check=True)
    assert pinned.stdout.split() == ["1", "1"]           # one core allowed: one job, whatever the machine has
    if usable_cores() > 1:
        assert resolve_jobs(None, None, 1e6) == usable_cores()
    assert resolve_jobs(None, None, 0.5) == 1             # less work than starting workers costs: here
    assert resolve_jobs(None, object(), 1e6) == 1         # a Dask client's workers run the heads
    assert resolve_jobs(1, None, 1e6) == 1
    with pytest.raises(QkvizError, match="jobs must be between 1 and"):
        resolve_jobs(usable_cores() + 1, None)


@two_cores
def test_stats_with_the_default_jobs_stores_what_one_job_stores(tiny_run, tmp_path, caplog, pools_for_any_work):
    source = tiny_run("llama")
    one, default = _copy(source, tmp_path / "one"), _copy(source, tmp_path / "default")
    asked = dict(max_offset=8, exemplars=3, progress=False)
    threads, variable = _torch().get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    expected = qkviz.compute_stats(one, jobs=1, **asked)       # the probes run the model here, on its threads
    assert _torch().get_num_threads() == threads
    with caplog.at_level(logging.DEBUG, logger="qkviz.analysis.atlas.head_atlas"):
        found = qkviz.compute_stats(default, **asked)
    assert f"head statistics on {usable_cores()} local jobs" in caplog.text
    assert _torch().get_num_threads() == threads and os.environ.get("OMP_NUM_THREADS") == variable
    for atlas in (found, default.atlas):                       # as computed, and as stored and read back
        for name in ("table", "exemplars", "labels", "probes"):
            pd.testing.assert_frame_equal(getattr(atlas, name), getattr(expected, name), check_exact=True, obj=name)
        for name in ("relative_position", "term_profiles", "offset_support"):
            np.testing.assert_array_equal(getattr(atlas, name), getattr(expected, name), err_msg=name)
        assert (atlas.probe_note, atlas.writes_note) == (expected.probe_note, expected.writes_note)
    statistics = expected.table.select_dtypes("number").drop(columns=["layer", "head"])
    assert len(expected.probes) and statistics.nunique().max() == len(expected.table)   # heads told apart: order counts


@two_cores
def test_project_with_the_default_jobs_makes_what_one_job_makes(tiny_run, tmp_path, pools_for_any_work):
    source = tiny_run("llama")
    one, default = _copy(source, tmp_path / "one"), _copy(source, tmp_path / "default")
    short = {"early_exaggeration_iter": 10, "n_iter": 10}
    asked = dict(methods=["attn-tsne"], dims=[2], layers=[0], heads=[0, 1, 2], seed=3, progress=False,
                 params={"attn-tsne": short})
    assert qkviz.project(one, jobs=1, **asked).computed == 3
    assert qkviz.project(default, **asked).computed == 3
    here, there = (ProjectionCache(run.path, run.manifest["fingerprint"]) for run in (one, default))
    assert sorted(map(str, there.specs())) == sorted(map(str, here.specs()))
    for spec in here.specs():
        np.testing.assert_array_equal(there.load(spec), here.load(spec), err_msg=str(spec))
    assert not np.array_equal(here.load(here.specs()[0]), here.load(here.specs()[1]))   # heads differ


def test_related_with_the_default_threads_stores_what_one_thread_stores(tiny_run, tmp_path):
    source = tiny_run("llama")
    one, default = _copy(source, tmp_path / "one"), _copy(source, tmp_path / "default")
    expected = qkviz.relate_heads(one, max_queries=40, progress=False, jobs=1)
    qkviz.relate_heads(default, max_queries=40, progress=False)
    found = default.related
    for name in ("js_distance", "geometry_similarity", "order", "map_xy", "sentences"):
        np.testing.assert_array_equal(getattr(found, name), getattr(expected, name), err_msg=name)
    assert np.ptp(expected.js_distance[np.triu_indices(len(expected.js_distance), 1)]) > 0


@two_cores
def test_a_pool_worker_runs_one_torch_thread(tiny_run):
    threads = torch_threads()
    with HeadRunner(tiny_run("llama"), "stats", 2) as runner:
        counts = [count for _, count in runner.run(torch_threads, [HeadTask(0, head, ()) for head in range(4)])]
    assert counts == [1, 1, 1, 1]
    assert torch_threads() == threads          # this process keeps its own


@two_cores
def test_a_script_without_a_main_guard_runs_its_heads_here(tiny_run, tmp_path):
    run = _copy(tiny_run("llama"), tmp_path / "run")
    script = tmp_path / "script.py"
    script.write_text("import qkviz\nfrom qkviz.cluster import job_count\njob_count.POOL_START_SECONDS = -1.0\n"
                      f"atlas = qkviz.compute_stats({str(run.path)!r}, probes=False, progress=False)\n"
                      "print('heads', len(atlas.table))\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["heads", str(run.n_layers * run.n_heads)]
    assert "the heads run in this process, on one core" in done.stderr and "__main__" in done.stderr


def test_the_command_line_takes_the_default_and_refuses_bad_jobs(tiny_run, tmp_path):
    run = _copy(tiny_run("llama"), tmp_path / "run")
    assert run_main("related", "--run", run.path, "--max-queries", "20").returncode == 0
    assert run.related is not None
    one_line_error(run_main("stats", "--run", run.path, "--jobs", "0"), "--jobs")
    one_line_error(run_main("related", "--run", run.path, "--jobs", usable_cores() + 1), "--jobs")


def _torch():
    import torch

    return torch
