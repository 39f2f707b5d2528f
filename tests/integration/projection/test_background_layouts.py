"""Layouts made in the background (``qkviz serve``) and by two projecting processes at once: each layout lands
in the cache, a head that fails is recorded (``qkviz status``, the app) while the others go on, and two
processes on one run compute each head once."""

import json
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from support.browser import copy_run, start_server, stop_server
from support.cli import run_main
from support.runs import reseal

import qkviz
from dash_app.data.run_data import RunData
from qkviz.projection import LayoutWorker
from qkviz.report.run_status import describe_run
from qkviz.projection import layout_spec
from qkviz.store import ProjectionCache, ProjectionSpec
from qkviz.store.files import CACHE_DIRECTORY

BROKEN = (1, 2)   # the head whose vectors are damaged


@pytest.fixture(scope="module")
def small_run(tiny_run):
    """A tiny Llama run (2 layers x 4 heads) of 5 sentences: a few seconds per head for every layout."""
    return tiny_run("llama", max_sentences=5)


def default_spec(run, layer: int, head: int, method: str = "attn-tsne", dim: int = 2) -> ProjectionSpec:
    return layout_spec(layer, head, method, dim)


def damage_queries(run, layer: int, head: int) -> np.ndarray:
    """Write NaN over one head's stored queries (what a float16 overflow leaves); returns the old values."""
    stored = np.load(run.path / "queries.npy", mmap_mode="r+")
    original = np.array(stored[layer, head])
    stored[layer, head] = np.nan
    stored.flush()
    reseal(run.path)
    return original


def test_worker_makes_the_missing_layouts_and_records_a_failing_head(small_run, tmp_path):
    run = copy_run(small_run, tmp_path / "run", atlas=False)
    original = damage_queries(run, *BROKEN)
    worker = LayoutWorker(run, "pca")   # any method: what fails is the head's data
    assert (worker.progress().total, worker.progress().done) == (8, 0) and worker.pending(*BROKEN)
    worker.run_all()

    progress = worker.progress()
    assert progress.finished and progress.done == 7 and set(progress.failed) == {BROKEN}
    assert "not all finite" in progress.failed[BROKEN] and not worker.pending(*BROKEN)
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    made = {(layer, head) for layer in range(2) for head in range(4) if cache.contains(default_spec(run, layer, head, "pca"))}
    assert made == {(layer, head) for layer in range(2) for head in range(4)} - {BROKEN}
    # recorded in the run: qkviz status and the app (without the worker) show it
    assert [(spec.layer, spec.head, spec.method) for spec, _ in cache.failures()] == [(1, 2, "pca")]
    assert any(line.startswith("failed     layer 1 head 2 pca 2D: the head's stored queries")
               for line in describe_run(run))
    data = RunData(run, "run")
    assert "not all finite" in data.layout_failure(*BROKEN, "pca", 2)
    # the app shows it on that head: a badge in the matrix, the error in the single view
    from dash_app.state.view_state import ViewState
    from dash_app.views import single as single_view
    from dash_app.views.matrix import view as matrix_view
    from qkviz.core.errors import QkvizError

    labels = list(matrix_view.render_matrix(data, ViewState(method="pca"), None, None)[0].data[4].text)
    assert [flat for flat, label in enumerate(labels) if "layout failed" in label] == [BROKEN[0] * 4 + BROKEN[1]]
    with pytest.raises(QkvizError, match="could not be made: the head's stored queries"):
        single_view.render_single(data, ViewState(view="single", layer=1, head=2, method="pca"), [], np.zeros(0, int),
                                  5, 0.0)

    # qkviz project says which failed, makes the rest, exits 1; repaired, the layout is made and the record goes
    result = run_main("-q", "project", "--run", str(run.path), "--method", "pca", "--dim", "2")
    assert result.returncode == 1 and "layer 1 head 2 pca 2D failed" in result.stderr
    stored = np.load(run.path / "queries.npy", mmap_mode="r+")
    stored[BROKEN] = original
    stored.flush()
    reseal(run.path)
    assert run_main("-q", "project", "--run", str(run.path), "--method", "pca", "--dim", "2").returncode == 0
    assert cache.failures() == [] and cache.contains(default_spec(run, *BROKEN, "pca"))
    assert not any(line.startswith("failed") for line in describe_run(run))


PROJECT = """
import sys, qkviz
summary = qkviz.project(sys.argv[1], methods=["attn-tsne"], dims=[2], progress=False)
print(summary.computed, summary.cached, len(summary.failed))
"""


def test_two_processes_projecting_one_run_compute_each_head_once(small_run, tmp_path):
    run = copy_run(small_run, tmp_path / "run", atlas=False)
    processes = [subprocess.Popen([sys.executable, "-c", PROJECT, str(run.path)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [process.communicate(timeout=300) for process in processes]
    assert all(process.returncode == 0 for process in processes), results
    counts = [tuple(int(part) for part in out.split()) for out, _ in results]
    assert sum(computed for computed, _, _ in counts) == 8, counts           # each head made by one of them
    assert all(computed + cached == 8 and failed == 0 for computed, cached, failed in counts), counts
    sidecars = list((run.path / CACHE_DIRECTORY).glob("*.json"))
    assert sum(json.loads(path.read_text())["spec"]["method"] == "attn-tsne" for path in sidecars) == 8


def test_serve_makes_pca_before_answering_and_the_default_layouts_in_the_background(small_run, tmp_path):
    run = copy_run(small_run, tmp_path / "bare", atlas=False)
    shutil.rmtree(run.path / CACHE_DIRECTORY, ignore_errors=True)   # no layouts at all
    heads = [(layer, head) for layer in range(2) for head in range(4)]
    server, _ = start_server([run.path], background="attn-tsne")
    try:
        cache = ProjectionCache(run.path, run.manifest["fingerprint"])
        # the server answered: every head's PCA (2D and 3D) was made before it did
        assert all(cache.contains(default_spec(run, *head, "pca", dim)) for head in heads for dim in (2, 3))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not all(cache.contains(default_spec(run, *head)) for head in heads):
            time.sleep(0.5)
        assert all(cache.contains(default_spec(run, *head)) for head in heads)
    finally:
        output = stop_server(server)
    assert "Traceback" not in output, output
    assert "making the attn-tsne 2D layouts of 8 heads in the background" in output, output


def test_a_run_with_every_layout_starts_no_worker(small_run, tmp_path):
    from dash_app.server import attach_workers

    run = copy_run(small_run, tmp_path / "run", atlas=False)
    assert qkviz.project(run, methods=["pca"], dims=[2], progress=False).computed == 8
    data = RunData(run, "run")
    assert attach_workers([data], "pca") == [] and data.worker is None
    assert data.default_method() == "pca" and data.offered_layouts() == (("pca", 2),)
