"""``qkviz project`` and ``run.projection``: cached layouts, skipped work, clear errors."""

import numpy as np
import pytest

import qkviz
from qkviz.cli import main
from qkviz.errors import QkvizError
from qkviz.projection_cache import CACHE_DIRECTORY


@pytest.fixture(scope="module")
def small_run(tiny_model, tiny_corpus, tmp_path_factory):
    return qkviz.extract(str(tiny_model("llama")), tiny_corpus, tmp_path_factory.mktemp("p") / "run",
                         max_sentences=20).run


def test_project_caches_layouts_and_skips_them_next_time(small_run, capsys):
    with pytest.raises(QkvizError, match="qkviz project --run .* --method pca --dim 2 --layers 1 --heads 2"):
        small_run.projection(1, 2, "pca", 2)
    assert main(["project", "--run", str(small_run.path), "--method", "pca,tsne", "--dim", "2,3",
                 "--layers", "1", "--heads", "0-2"]) == 0
    entries = sorted((small_run.path / CACHE_DIRECTORY).glob("*.npy"))
    assert len(entries) == 9  # pca 2D + 3D and t-SNE 2D (3D t-SNE is opt-in) for 3 heads
    layout = small_run.projection(1, 2, "pca", 2)
    assert layout.shape == (2 * small_run.n_tokens, 2) and layout.dtype == np.float32
    assert small_run.projection(1, 2, "tsne", 2).shape == (2 * small_run.n_tokens, 2)
    mtimes = [entry.stat().st_mtime_ns for entry in entries]
    assert main(["project", "--run", str(small_run.path), "--method", "pca,tsne", "--dim", "2,3",
                 "--layers", "1", "--heads", "0-2"]) == 0
    assert [entry.stat().st_mtime_ns for entry in entries] == mtimes  # nothing recomputed


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
