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
