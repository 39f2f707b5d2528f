"""The Python API: every command is a function of ``qkviz``, typed and documented, and a run made through
it holds what the CLI would make; ``import qkviz`` needs neither torch nor Dash."""

import inspect
import json
import subprocess
import sys

import numpy as np
import pytest

import qkviz
from support.cli import run_main
from qkviz.cli import main

COMMAND_FUNCTIONS = ("extract", "project", "build_indexes", "compute_stats", "relate_heads", "correlation_report",
                     "write_report", "open_run", "correlation_table")
SUBPACKAGES = ("core", "store", "extraction", "projection", "analysis", "search", "report")


def test_every_public_name_is_importable_after_import_qkviz():
    import importlib

    for name in qkviz.__all__:
        assert getattr(qkviz, name) is not None, name
    for package in SUBPACKAGES:
        module = importlib.import_module(f"qkviz.{package}")
        assert module.__doc__, package
        for name in module.__all__:
            assert getattr(module, name) is not None, f"qkviz.{package}.{name}"


@pytest.mark.parametrize("name", COMMAND_FUNCTIONS)
def test_command_functions_have_typed_signatures_and_numpy_docstrings(name):
    function = getattr(qkviz, name)
    signature = inspect.signature(function)
    kinds = {parameter.kind for parameter in signature.parameters.values()}
    assert inspect.Parameter.VAR_POSITIONAL not in kinds and inspect.Parameter.VAR_KEYWORD not in kinds
    assert all(parameter.annotation is not inspect.Parameter.empty for parameter in signature.parameters.values())
    assert signature.return_annotation is not inspect.Signature.empty
    doc = inspect.getdoc(function)
    assert doc and ("Parameters\n----------" in doc or len(signature.parameters) == 1), name


def test_import_qkviz_needs_neither_torch_nor_dash():
    """In a fresh interpreter where dash cannot be imported at all, qkviz imports without loading torch, and
    'qkviz serve' says which extra to install in one line."""
    code = ("import sys; sys.modules['dash'] = None; import qkviz, qkviz.cli; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; "
            "sys.exit(qkviz.cli.main(['serve', '--run', 'nowhere']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "pip install 'qkviz[app]'" in result.stderr


@pytest.fixture(scope="module")
def api_run(tiny_model, tiny_corpus, tmp_path_factory):
    """A tiny Llama run taken through every command by the Python API alone."""
    run = qkviz.extract(str(tiny_model("llama")), tiny_corpus, tmp_path_factory.mktemp("api") / "run",
                        max_sentences=16, progress=False)
    summary = qkviz.project(run, methods=["pca"], dims=[2, 3], progress=False)
    assert (summary.computed, summary.cached) == (2 * run.n_layers * run.n_heads, 0)
    assert qkviz.project(run.path, methods=["pca"], dims=[2], layers=[1], heads=[0], progress=False).cached == 1
    qkviz.build_indexes(run, progress=False)
    qkviz.compute_stats(run, exemplars=2, progress=False)
    qkviz.relate_heads(run, max_queries=100, progress=False)
    return run


def test_a_run_made_by_the_api_holds_every_result(api_run, tmp_path):
    run = api_run
    assert isinstance(run, qkviz.Run) and isinstance(qkviz.open_run(run.path), qkviz.Run)
    layout = run.projection(1, 2, method="pca", dim=3)
    assert layout.shape == (2 * run.n_tokens, 3) and np.isfinite(layout).all()
    assert len(run.atlas.table) == run.n_layers * run.n_heads
    assert run.related.js_distance.shape == (run.n_layers * run.n_heads,) * 2
    assert run.correlations is None
    report = qkviz.correlation_report(run, progress=False)
    out = qkviz.write_report(report, tmp_path / "report")
    assert json.loads((out / "summary.json").read_text())["n_layers"] == run.n_layers
    assert set(run.correlations.space) >= {"original", "pca-2d", "pca-3d"}
    status = run.status()
    assert "pca 2D: 8/8 heads" in status and "token index stored" in status


def test_partners_are_the_highest_logits_over_the_corpus(api_run):
    run, layer, head, point = api_run, 1, 3, 5
    found = run.partners(layer, head, point=point, k=7)
    logits = run.scale(layer) * run.keys(layer, head) @ run.queries(layer, head)[point]
    best = np.sort(logits)[::-1][:7]
    np.testing.assert_allclose(found.logits, best, rtol=1e-5, atol=1e-5)
    assert found.partner_side == "key" and (found.points >= run.n_tokens).all()


def test_api_refuses_bad_parameters_in_one_line(api_run):
    for call, fragment in ((lambda: qkviz.project(api_run, jobs=0), "jobs"),
                           (lambda: qkviz.project(api_run, methods=["nope"]), "unknown projection method"),
                           (lambda: qkviz.project(api_run, layers=[9]), "layer 9 is out of range"),
                           (lambda: qkviz.build_indexes(api_run, exact_limit=0), "exact_limit"),
                           (lambda: qkviz.compute_stats(api_run, argmax_share=2.0), "argmax_share"),
                           (lambda: qkviz.relate_heads(api_run, max_queries=0), "max_queries"),
                           (lambda: qkviz.correlation_report(api_run, max_pairs=1), "max_pairs")):
        with pytest.raises(qkviz.QkvizError, match=fragment) as error:
            call()
        assert "\n" not in str(error.value)


def test_the_cli_makes_what_the_api_makes(api_run, tmp_path, capsys):
    """'qkviz project' through main() caches exactly the entries qkviz.project cached (same keys)."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(api_run.path, copy, ignore=shutil.ignore_patterns("projections"))
    assert main(["-q", "project", "--run", str(copy), "--method", "pca", "--dim", "2,3"]) == 0
    made = sorted(path.name for path in (copy / "projections").iterdir())
    assert made == sorted(path.name for path in (api_run.path / "projections").iterdir())


def test_attention_layouts_refuse_bad_graph_parameters_before_any_work(api_run, capsys):
    before = sorted(path.name for path in (api_run.path / "projections").iterdir())
    for option, value, fragment in (("--k", "0", "argument --k: must be a whole number >= 1, got 0"),
                                    ("--k", str(api_run.n_tokens + 1), "k must be between 1"),
                                    ("--alpha", "-1", "argument --alpha"), ("--alpha", "nan", "must be a finite number >= 0, got nan"),
                                    ("--temperature", "0", "argument --temperature")):
        result = run_main("-q", "project", "--run", api_run.path, "--method", "attn-tsne", "--dim", "2", option, value)
        assert result.returncode == 2 and fragment in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert sorted(path.name for path in (api_run.path / "projections").iterdir()) == before


def test_attention_layouts_through_the_api(api_run, tmp_path):
    import shutil

    run = qkviz.open_run(shutil.copytree(api_run.path, tmp_path / "run"))   # the shared run stays as it is
    qkviz.project(run, methods=["attn-tsne", "attn-umap"], dims=[2], layers=[0], heads=[1], progress=False,
                  params={"attn-tsne": {"k": 5}})
    for method, params in (("attn-tsne", {"k": 5}), ("attn-umap", {})):
        layout = run.projection(0, 1, method=method, **params)
        assert layout.shape == (2 * run.n_tokens, 2) and np.isfinite(layout).all()


def test_projection_counts_are_the_heads_whose_layout_is_cached(api_run, tmp_path):
    """One listing of the cache counts what asking each head gives, and follows a layout removed."""
    import shutil

    run = qkviz.open_run(shutil.copytree(api_run.path, tmp_path / "run"))
    heads = [(layer, head) for layer in range(run.n_layers) for head in range(run.n_heads)]

    def asked_one_by_one():
        return {(method, dim): sum(run.has_projection(layer, head, method, dim) for layer, head in heads)
                for method, dim in run.projection_counts()}

    counts = run.projection_counts()
    assert counts == asked_one_by_one()
    assert counts[("pca", 2)] == counts[("pca", 3)] == len(heads) and counts[("attn-tsne", 2)] == 0
    _, layout = run.projection_file(1, 0, "pca", 2)
    layout.with_suffix(".json").unlink()
    assert run.projection_counts()[("pca", 2)] == len(heads) - 1 == asked_one_by_one()[("pca", 2)]


# -- layouts on demand (issue 30, point 2) ------------------------------------------------------
@pytest.fixture
def fresh_run(tiny_run, tmp_path):
    """A copy of the tiny Llama run as 'qkviz extract' left it: no layout cached."""
    import shutil

    copy = shutil.copytree(tiny_run("llama").path, tmp_path / "fresh", ignore=shutil.ignore_patterns("projections"))
    return qkviz.open_run(copy)


def cache_entries(run) -> dict[str, tuple[int, int]]:
    """``{file name: (inode, mtime_ns)}`` of the run's cache entries (arrays and sidecars; not locks or failures)."""
    directory = run.path / "projections"
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns)
            for path in directory.glob("*.*")} if directory.exists() else {}


def test_a_fresh_run_makes_the_heads_default_layout_on_demand_as_qkviz_project_would(fresh_run, tmp_path):
    """run.projection(L, H) on a run without layouts makes the run's default layout of that head only, in the cache
    entry 'qkviz project' writes (the same key and coordinates); a second call and a later 'qkviz project' reuse it."""
    import shutil

    run = fresh_run
    assert cache_entries(run) == {}
    layout = run.projection(1, 2, progress=False)
    assert layout.shape == (2 * run.n_tokens, 2) and layout.dtype == np.float32 and np.isfinite(layout).all()
    key, array = run.projection_file(1, 2, qkviz.projection.LAYOUT_METHOD, 2)
    assert sorted(cache_entries(run)) == [f"{key}.json", f"{key}.npy"] and run.has_projection(1, 2, "attn-tsne")

    other = shutil.copytree(run.path, tmp_path / "by-cli", ignore=shutil.ignore_patterns("projections"))
    assert main(["-q", "project", "--run", str(other), "--method", "attn-tsne", "--dim", "2", "--layers", "1",
                 "--heads", "2"]) == 0
    assert sorted(path.name for path in (other / "projections").glob("*.*")) == sorted(cache_entries(run))
    np.testing.assert_allclose(np.load(other / "projections" / array.name), layout, atol=1e-5)

    before = cache_entries(run)
    np.testing.assert_array_equal(run.projection(1, 2, progress=False), layout)
    np.testing.assert_array_equal(qkviz.open_run(run.path).projection(1, 2, method="attn-tsne", progress=False), layout)
    summary = qkviz.project(run, methods=["attn-tsne"], dims=[2], layers=[1], heads=[2], progress=False)
    assert (summary.computed, summary.cached) == (0, 1)
    assert cache_entries(run) == before          # the same files, not written again


def test_plot_on_a_fresh_run_draws_the_layout_it_makes(fresh_run, capsys):
    capsys.readouterr()
    figure = fresh_run.plot(0, 3, colour="type")
    assert "attn-tsne 2D" in figure.layout.title.text
    progress = capsys.readouterr().err                    # the progress line while the layout is made
    assert "projecting" in progress and "1/1" in progress, progress
    n = fresh_run.n_tokens
    np.testing.assert_array_equal(np.asarray(figure.data[0].x), fresh_run.projection(0, 3, progress=False)[:n, 0])
    with pytest.raises(qkviz.QkvizError, match="unknown colour 'hue'"):
        fresh_run.plot(0, 1, colour="hue")
    assert not fresh_run.has_projection(0, 1, "attn-tsne")      # refused before any layout was made


def test_a_named_method_is_made_and_one_too_costly_is_refused_with_the_exact_command(fresh_run, monkeypatch):
    import shlex

    from qkviz.projection import on_demand

    run = fresh_run
    assert run.projection(0, 1, method="pca", dim=3, progress=False).shape == (2 * run.n_tokens, 3)
    assert run.has_projection(0, 1, "pca", 3) and not run.has_projection(0, 1, "pca", 2)
    with pytest.raises(qkviz.QkvizError, match="unknown projection method 'nope'"):
        run.projection(0, 1, method="nope")
    with pytest.raises(qkviz.QkvizError, match="tsne's perplexity must be a finite number above 0"):
        run.projection(0, 1, method="tsne", perplexity=-1.0)

    monkeypatch.setattr(on_demand, "ON_DEMAND_FIT_TOKENS", run.n_tokens - 1)   # the tiny run as if it were large
    settings = dict(method="tsne", seed=3, scale_norms=False, perplexity=7.5, progress=False)
    with pytest.raises(qkviz.QkvizError) as refused:
        run.projection(1, 0, **settings)
    message = str(refused.value)
    assert "\n" not in message and "would take minutes" in message and cache_entries(run).keys() == {
        f"{run.projection_file(0, 1, 'pca', 3)[0]}.{suffix}" for suffix in ("json", "npy")}
    command = message.split("make it with '")[1].rstrip("'")
    assert command == (f"qkviz project --run {run.path} --method tsne --dim 2 --layers 1 --heads 0 --seed 3 "
                       "--no-scale --perplexity 7.5")
    assert main(["-q", *shlex.split(command)[1:]]) == 0
    layout = run.projection(1, 0, **settings)        # the command made exactly this entry: read, not refused
    assert layout.shape == (2 * run.n_tokens, 2)
    assert run.projection(1, 0, method="pca", progress=False).shape == (2 * run.n_tokens, 2)   # PCA: always cheap


def test_a_layout_another_process_is_making_is_waited_for_not_made_twice(fresh_run):
    """While the head's lock is held (by 'qkviz project' or the app's background worker), run.projection waits;
    what the holder cached is then returned as it is."""
    import threading

    from qkviz.projection import layout_spec
    from qkviz.store.locks import exclusive_lock
    from qkviz.store.projections import ProjectionCache

    run = fresh_run
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    planted = np.arange(2 * run.n_tokens * 2, dtype=np.float32).reshape(-1, 2)   # no method makes this
    found = {}
    with exclusive_lock(cache.head_lock(1, 3)):
        reader = threading.Thread(target=lambda: found.setdefault("layout", run.projection(1, 3, progress=False)))
        reader.start()
        reader.join(timeout=2.0)
        assert reader.is_alive() and cache_entries(run) == {}     # waiting, nothing written
        cache.store(layout_spec(1, 3, "attn-tsne", 2), planted)   # what the holder makes
    reader.join(timeout=60)
    np.testing.assert_array_equal(found["layout"], planted)


def test_nothing_is_made_without_make_or_on_a_run_opened_read_only(fresh_run):
    """What the app reads (make=False: it never computes inside a request) and a read-only run: the command
    instead of a layout, and the cache untouched."""
    command = f"'qkviz project --run {fresh_run.path} --method attn-tsne --dim 2 --layers 0 --heads 2'"
    with pytest.raises(qkviz.QkvizError, match="no attn-tsne 2D projection of layer 0 head 2") as refused:
        fresh_run.projection(0, 2, make=False)
    assert str(refused.value).endswith(f"make it with {command}")
    read_only = qkviz.open_run(fresh_run.path, read_only=True)
    for call in (lambda: read_only.projection(0, 2), lambda: read_only.plot(0, 2)):
        with pytest.raises(qkviz.QkvizError, match="opened read-only") as refused:
            call()
        assert str(refused.value).endswith(command)
    assert cache_entries(fresh_run) == {} and not (fresh_run.path / "projections").exists()
