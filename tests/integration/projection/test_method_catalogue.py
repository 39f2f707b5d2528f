"""The projection-method catalogue: a method registered in one place is found by the command line, the Python API
and the app, and every setting is checked once, at the edge."""

import shutil

import numpy as np
import pytest

import qkviz
from dash_app.app import method_options
from dash_app.data.run_data import RunData
from dash_app.url_state import parse_url
from qkviz.cli import main
from qkviz.cli_parser import build_parser
from qkviz.projection import (FitInputs, Parameter, Projection, ProjectionMethod, command_line_options, method_names,
                              projection_method, register, unregister)
from support import REPO

TOY = "toy-spread"


def fit_toy(inputs: FitInputs) -> Projection:
    """The points' first coordinates times ``spread``: a method whose output shows its parameter."""
    return Projection(inputs.points[:, :inputs.dim] * inputs.params["spread"], dict(inputs.params), {})


@pytest.fixture
def toy_method():
    register(ProjectionMethod(
        name=TOY, label="toy spread", fit=fit_toy, rank=25, default_dims=(2,), instant=True,
        summary="the first coordinates, spread",
        parameters=(Parameter("spread", 1.0, "real", "how far apart", low=0.0, low_open=True),)))
    yield TOY
    unregister(TOY)


@pytest.fixture
def toy_run(app_run, tmp_path):
    """A copy of the app's run (its PCA layouts) that the toy method can write into."""
    shutil.copytree(app_run.path, tmp_path / "run")
    return qkviz.open_run(tmp_path / "run")


def test_a_registered_method_is_in_the_cli_the_api_and_the_app(toy_method, toy_run, capsys):
    parser_help = build_parser()._subparsers._group_actions[0].choices["project"].format_help()
    assert TOY in parser_help and "--spread" in parser_help and "how far apart" in parser_help
    # the command line: its flag goes to it, and is checked by the parameter's own range
    assert main(["-q", "project", "--run", str(toy_run.path), "--method", TOY, "--spread", "3", "--layers", "0",
                 "--heads", "1"]) == 0
    scaled = toy_run.projection(0, 1, TOY, spread=3.0)
    assert main(["-q", "project", "--run", str(toy_run.path), "--method", TOY, "--spread", "0"]) == 2
    assert "argument --spread: must be a finite number above 0, got 0" in capsys.readouterr().err
    # the API: defaults from the declaration, the same check
    qkviz.project(toy_run, methods=[TOY], progress=False)
    plain = toy_run.projection(0, 1, TOY)
    np.testing.assert_allclose(scaled, 3 * plain, rtol=1e-6)
    with pytest.raises(qkviz.QkvizError, match=f"^{TOY}'s spread must be a finite number above 0, got -1.0$"):
        qkviz.project(toy_run, methods=[TOY], params={TOY: {"spread": -1.0}}, progress=False)
    # the app: offered with its label and its heads counted, and accepted in a URL
    data = RunData(toy_run, "toy")
    assert TOY in data.offered_methods()
    labels = {option["value"]: option["label"] for option in method_options(data)}
    assert labels[TOY].startswith(f"toy spread ({data.n_total_heads}/{data.n_total_heads} heads")
    state, notices = parse_url(f"?method={TOY}&view=single", [data.shape])
    assert state.method == TOY and not notices
    # the report's best layout: the catalogue's rank puts it after attn-umap (20), before umap and pca
    assert method_names().index(TOY) == method_names().index("umap") - 1


def test_a_flag_no_chosen_method_takes_is_refused_in_one_line(toy_run, capsys):
    """It was dropped silently: --perplexity with pca made PCA layouts and said nothing."""
    assert main(["-q", "project", "--run", str(toy_run.path), "--method", "pca", "--perplexity", "50"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--perplexity is a parameter of tsne, not of pca" in error


def test_a_setting_is_checked_where_it_enters(toy_run):
    for params, message in (({"tsne": {"perplexity": 0}}, "tsne's perplexity must be a finite number above 0"),
                            ({"umap": {"metric": "manhattan"}}, "umap's metric 'manhattan' is not one of"),
                            ({"attn-tsne": {"hide_first_token": "yes"}}, "attn-tsne's hide_first_token must be true"),
                            ({"pca": {"perplexity": 5}}, "pca has no parameter perplexity")):
        method = next(iter(params))
        with pytest.raises(qkviz.QkvizError, match=message):
            qkviz.project(toy_run, methods=[method], params=params, progress=False)


def test_run_projection_without_a_method_reads_the_heads_best_layout(toy_run):
    """``run.projection(L, H)`` asked for a t-SNE layout that a default run never makes; now it reads the most
    faithful layout the head has, and names the default method's command when there is none."""
    np.testing.assert_array_equal(toy_run.projection(0, 1), toy_run.projection(0, 1, "pca"))
    qkviz.project(toy_run, methods=["attn-tsne"], layers=[0], heads=[1], progress=False)
    np.testing.assert_array_equal(toy_run.projection(0, 1), toy_run.projection(0, 1, "attn-tsne"))
    shutil.rmtree(toy_run.path / "projections")
    with pytest.raises(qkviz.QkvizError, match="--method attn-tsne --dim 2 --layers 0 --heads 1"):
        toy_run.projection(0, 1, make=False)


def test_every_method_declares_what_the_catalogue_derives_from():
    for name in method_names():
        method = projection_method(name)
        assert method.label and method.summary and set(method.default_dims) <= set(method.dims)
        for parameter in method.parameters:
            assert parameter.check(name, parameter.default) == parameter.default


def test_the_command_line_page_lists_every_method_option_as_the_catalogue_declares_it():
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    for option in command_line_options():
        assert f"| `{option.parameter.flag}` | {option.help()} |" in page, option.parameter.flag
