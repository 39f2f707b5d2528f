"""``qkviz project`` and ``run.projection``: cached layouts, skipped work, clear errors."""

import numpy as np
import pytest

import qkviz
from qkviz.cli import main
from qkviz.core.errors import QkvizError
from qkviz.store.files import CACHE_DIRECTORY


@pytest.fixture(scope="module")
def small_run(tiny_model, tiny_corpus, tmp_path_factory):
    return qkviz.extract(str(tiny_model("llama")), tiny_corpus, tmp_path_factory.mktemp("p") / "run",
                         max_sentences=20)


def test_project_caches_layouts_and_skips_them_next_time(small_run, capsys):
    with pytest.raises(QkvizError, match="qkviz project --run .* --method pca --dim 2 --layers 1 --heads 2"):
        small_run.projection(1, 2, "pca", 2, make=False)
    assert main(["project", "--run", str(small_run.path), "--method", "pca,tsne",
                 "--layers", "1", "--heads", "0-2"]) == 0
    entries = sorted((small_run.path / CACHE_DIRECTORY).glob("*.npy"))
    assert len(entries) == 9  # by default pca 2D + 3D and t-SNE 2D (3D t-SNE when asked for) for 3 heads
    layout = small_run.projection(1, 2, "pca", 2)
    assert layout.shape == (2 * small_run.n_tokens, 2) and layout.dtype == np.float32
    assert small_run.projection(1, 2, "tsne", 2).shape == (2 * small_run.n_tokens, 2)
    mtimes = [entry.stat().st_mtime_ns for entry in entries]
    assert main(["project", "--run", str(small_run.path), "--method", "pca,tsne",
                 "--layers", "1", "--heads", "0-2"]) == 0
    assert [entry.stat().st_mtime_ns for entry in entries] == mtimes  # nothing recomputed
    short = {"--early-exaggeration-iter": 10, "--n-iter": 10, "--n-iter-3d": 5}   # quick: only its existence counts
    assert main(["-q", "project", "--run", str(small_run.path), "--method", "tsne", "--dim", "3", "--layers", "1",
                 "--heads", "2", *(str(part) for pair in short.items() for part in pair)]) == 0   # asked for: made
    assert small_run.projection(1, 2, "tsne", 3, early_exaggeration_iter=10, n_iter=10,
                                n_iter_3d=5).shape == (2 * small_run.n_tokens, 3)


def test_bad_project_requests_are_one_line_errors(small_run, capsys):
    for argv, message in (
            (["--method", "mds"], "unknown projection method 'mds'"),
            (["--dim", "4"], "unknown dimension 4"),
            (["--layers", "7"], "--layers 7 is out of range 0-1"),
            (["--heads", "x"], "--heads 'x' is not a list"),
    ):
        assert main(["project", "--run", str(small_run.path), *argv]) == 2
        assert message in capsys.readouterr().err
    assert main(["project", "--run", str(small_run.path / "missing")]) == 2
    assert "no run at" in capsys.readouterr().err


def test_status_counts_projected_heads(small_run, capsys):
    assert main(["project", "--run", str(small_run.path), "--method", "pca", "--dim", "3"]) == 0
    capsys.readouterr()
    assert main(["status", "--run", str(small_run.path)]) == 0
    assert "projected  pca 3D: 8/8 heads" in capsys.readouterr().out


@pytest.mark.e2e
def test_ctrl_c_keeps_the_cache_consistent_and_the_next_run_resumes(small_run, tmp_path):
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from support.cli import run_main

    # Short t-SNE optimisations (half a second a head, not five): the point is the interruption and the resume.
    # On a loaded machine the 8 heads may all be done before the signal lands: then again, with longer ones.
    for n_iter in (10, 60, 250):
        run_path = tmp_path / f"run-{n_iter}"
        shutil.copytree(small_run.path, run_path, ignore=shutil.ignore_patterns(CACHE_DIRECTORY))
        arguments = ["project", "--run", str(run_path), "--method", "tsne", "--dim", "2", "--n-iter", str(n_iter),
                     "--early-exaggeration-iter", "10"]
        command = [sys.executable, "-m", "qkviz", *arguments]
        # A user's shell delivers Ctrl-C; a test process may have come to ignore SIGINT (a worker's set-up run in
        # it), and an ignored signal stays ignored in a child: the child gets the default back.
        child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 120
        while not list((run_path / CACHE_DIRECTORY).glob("*.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        stderr = child.communicate(timeout=120)[1]
        if child.returncode != 0:           # interrupted (a finished run, exit 0, is tried again with longer heads)
            break
    assert child.returncode == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip() and "projecting" not in line]
    assert lines == ["qkviz: interrupted; finished work is kept: run the same command again to resume"]
    done = {path.name: path.stat().st_mtime_ns for path in (run_path / CACHE_DIRECTORY).glob("*.npy")}
    assert 0 < len(done) < 8
    resumed = run_main(*arguments)  # the resume in this process (the interruption needed a real one)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{8 - len(done)} layouts computed, {len(done)} already cached" in resumed.stderr
    run = qkviz.open_run(run_path)
    for layer in range(run.n_layers):
        for head in range(run.n_heads):
            assert run.projection(layer, head, "tsne", 2, n_iter=n_iter, early_exaggeration_iter=10).shape == (
                2 * run.n_tokens, 2)


def test_hide_first_token_makes_its_own_layout_through_the_command_line(small_run):
    """``--hide-first-token`` reaches the attention graph in the worker: its layout is cached apart from the
    default one and differs from it (first-token keys are no query's candidates)."""
    head = ["--layers", "0", "--heads", "1", "--dim", "2", "--method", "attn-tsne"]
    assert main(["-q", "project", "--run", str(small_run.path), *head]) == 0
    assert main(["-q", "project", "--run", str(small_run.path), *head, "--hide-first-token"]) == 0
    default = small_run.projection(0, 1, "attn-tsne", 2)
    hidden = small_run.projection(0, 1, "attn-tsne", 2, hide_first_token=True)
    assert default.shape == hidden.shape and not np.allclose(default, hidden)
