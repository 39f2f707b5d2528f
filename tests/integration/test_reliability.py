"""Issue 16's findings, one test each, named after the finding: nothing the user keeps is deleted, nothing
half-made is read, bad input is one line (exit 2), and the server accepts only what it should."""

import json
import shutil

import pytest
from support.cli import run_main

import qkviz


def one_line_error(result, *fragments: str) -> str:
    """The single error line of a refused command (exit 2), checked to contain ``fragments``."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# -- data loss ---------------------------------------------------------------------------------
def test_extract_overwrite_refuses_a_directory_whose_manifest_is_not_a_runs(tiny_model, tiny_corpus, tmp_path):
    out = tmp_path / "project"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"name": "my web extension", "version": 3}))
    (out / "notes.txt").write_text("mine")
    result = run_main("extract", "--model", tiny_model("llama"), "--corpus", tiny_corpus, "--out", out,
                      "--max-sentences", "3", "--overwrite")
    one_line_error(result, "not a qkviz run's", "nothing was replaced")
    assert sorted(path.name for path in out.iterdir()) == ["manifest.json", "notes.txt"]


def test_extract_overwrite_replaces_only_the_files_of_the_run(tiny_model, tiny_corpus, tiny_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(tiny_run("llama").path, out)
    (out / "notes.txt").write_text("mine")
    (out / "figures").mkdir()
    (out / "figures" / "plot.png").write_bytes(b"png")
    (out / "projections").mkdir(exist_ok=True)
    (out / "projections" / "stale.npy").write_bytes(b"x")
    result = run_main("-q", "extract", "--model", tiny_model("llama"), "--corpus", tiny_corpus, "--out", out,
                      "--max-sentences", "3", "--overwrite")                # other settings: the run is replaced
    assert result.returncode == 0, result.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / "figures" / "plot.png").read_bytes() == b"png"
    assert not (out / "projections").exists()                   # the old run's results went with it
    assert qkviz.open_run(out).n_sentences == 3


def test_report_overwrite_never_deletes_a_run_inside_the_report_directory(tiny_run, tmp_path):
    run = tiny_run("llama")
    out = tmp_path / "report"
    assert run_main("-q", "report", "--run", run.path, "--out", out).returncode == 0
    inside = out / "runs" / "mine"
    shutil.copytree(run.path, inside)
    result = run_main("-q", "report", "--run", run.path, "--out", out, "--overwrite")
    one_line_error(result, "holds more than a qkviz report", "runs")
    assert qkviz.open_run(inside).n_tokens == run.n_tokens
    shutil.rmtree(out / "runs")
    assert run_main("-q", "report", "--run", run.path, "--out", out, "--overwrite").returncode == 0   # a report alone


@pytest.mark.parametrize("content", ['{"schema_version": 1}', "not json", '{"fingerprint": "", "schema_version": 1}'])
def test_a_damaged_or_foreign_marker_is_never_taken_for_a_run(tiny_model, tiny_corpus, tmp_path, content):
    out = tmp_path / "run"
    out.mkdir()
    (out / "progress.json").write_text(content)
    (out / "queries.npy.partial").write_bytes(b"someone else's")
    result = run_main("extract", "--model", tiny_model("llama"), "--corpus", tiny_corpus, "--out", out,
                      "--max-sentences", "3", "--overwrite")
    one_line_error(result, "not a qkviz run's")
    assert (out / "queries.npy.partial").read_bytes() == b"someone else's"
