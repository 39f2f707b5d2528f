"""The command line: bad input gets one line and exit status 2, never a traceback."""

import json
import subprocess

import pytest
import transformers
from support.cli import run_main, run_process

from qkviz import QkvizError
from qkviz.extraction.families import MODEL_FAMILIES
from qkviz.store import files as run_files


def qkviz(*args: str, check_rc: int | None = None, process: bool = False,
          entry_point: bool = False) -> subprocess.CompletedProcess:
    """``qkviz ARGS`` through ``qkviz.cli.main`` in this process; in a real process (``python -m qkviz``, or the
    installed console script when ``entry_point``) for the few end-to-end tests (``process=True``)."""
    result = run_process(*args, entry_point=entry_point) if process or entry_point else run_main(*args)
    if check_rc is not None:
        assert result.returncode == check_rc, result.stderr
    return result


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.e2e
def test_models_lists_bundled_models_and_families():
    output = qkviz("models", check_rc=0, entry_point=True).stdout   # the installed console script
    assert output == qkviz("models", check_rc=0).stdout             # runs this checkout's qkviz.cli.main
    for expected in ("minilm", "smollm2", "gemma3", "vit", "deit", "dinov2", "dinov2-registers", "clip-vision", "siglip-vision"):
        assert expected in output
    rows = {line.split()[0]: line.split()[1] for line in output.splitlines() if line.startswith("  ")}
    for family in MODEL_FAMILIES:        # each with the status its test proves (tests/integration/models/test_model_families.py)
        assert rows[family.model_type] == family.status


def test_unknown_model_names_the_bundled_ones(tmp_path):
    assert_one_line_error(qkviz("extract", "--model", "no-such-model", "--out", str(tmp_path / "r")),
                          "no-such-model", "minilm, smollm2, gemma3")


def test_a_refused_family_says_why_in_one_line(tmp_path):
    config = transformers.MPNetConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32)
    config.architectures = ["MPNetModel"]
    config.save_pretrained(tmp_path / "mpnet")
    assert_one_line_error(qkviz("extract", "--model", str(tmp_path / "mpnet"), "--out", str(tmp_path / "r")),
                          "mpnet model not supported", "MPNet adds a learned relative-position bias")
    assert not (tmp_path / "r").exists()


def test_a_checkpoint_directory_without_a_config_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_one_line_error(qkviz("extract", "--model", str(tmp_path / "empty"), "--out", str(tmp_path / "r")),
                          "empty")
    assert not (tmp_path / "r").exists()


def test_bad_corpora(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"ok\nna\xefve\n")
    out = str(tmp_path / "r")
    assert_one_line_error(qkviz("extract", "--model", "minilm", "--corpus", str(tmp_path / "nope.txt"), "--out", out),
                          "nope.txt does not exist")
    assert_one_line_error(qkviz("extract", "--model", "minilm", "--corpus", str(empty), "--out", out),
                          "has no sentences")
    assert_one_line_error(qkviz("extract", "--model", "minilm", "--corpus", str(latin), "--out", out),
                          "latin.txt line 2 is not UTF-8")


@pytest.mark.e2e
def test_usage_mistakes_are_one_line(tmp_path):
    # argparse's mistake in a real process: its exit status and nothing but the one line (qkviz's own errors
    # in a real process: test_project_cli.py's Ctrl-C test)
    assert_one_line_error(qkviz("extract", "--model", "minilm", "--out", str(tmp_path), "--dtype", "int8",
                                process=True), "--dtype", "invalid choice")
    assert_one_line_error(qkviz("extract", "--model", "minilm", "--out", str(tmp_path), "--batch-size", "0"),
                          "argument --batch-size: 0 is out of range")


def test_long_sentences_are_truncated_counted_and_reported(tiny_model, tiny_corpus, tmp_path):
    result = qkviz("extract", "--model", str(tiny_model("bert")), "--corpus", str(tiny_corpus), "--out",
                   str(tmp_path / "r"), "--max-sentences", "10", "--max-length", "12", check_rc=0)
    manifest = json.loads((tmp_path / "r" / run_files.MANIFEST).read_text())
    truncated = manifest["counts"]["n_truncated_sentences"]
    assert truncated > 0
    assert f"{truncated} sentences were longer than the model allows and were truncated" in result.stderr
    import qkviz as api

    run = api.open_run(tmp_path / "r")
    assert run.sentences.n_tokens.max() == 12
    assert int(run.sentences.truncated.sum()) == truncated
    assert run.tokens.groupby("sentence").is_special.last().all()  # [SEP] kept after truncation


@pytest.mark.e2e
def test_conflicting_settings_and_damaged_runs(tiny_model, tiny_corpus, tmp_path):
    model, out = str(tiny_model("bert")), str(tmp_path / "r")
    qkviz("extract", "--model", model, "--corpus", str(tiny_corpus), "--out", out, "--max-sentences", "4", check_rc=0)
    assert "4 sentences" in qkviz("status", "--run", out, check_rc=0).stdout
    assert_one_line_error(  # in a real process: the model loads, and transformers prints nothing (qkviz quiets it)
        qkviz("extract", "--model", model, "--corpus", str(tiny_corpus), "--out", out, "--max-sentences", "5",
              process=True), "different settings", "--overwrite")
    (tmp_path / "r" / run_files.KEYS).write_bytes(b"\x93NUMPY")
    assert_one_line_error(qkviz("status", "--run", out), "damaged", "keys.npy")
    (tmp_path / "r" / run_files.MANIFEST).unlink()
    assert_one_line_error(qkviz("status", "--run", out), "not a complete qkviz run")


def test_missing_cuda_is_a_clear_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_one_line_error(qkviz("extract", "--model", "minilm", "--out", str(tmp_path / "r"), "--device", "cuda"),
                          "no CUDA device")


def test_the_console_log_shows_other_libraries_only_from_warnings_up(monkeypatch):
    """A library's information lines (a browser driver cleaning its temporary files, say) are not printed as qkviz's."""
    import logging

    import qkviz.cli

    def command(args):
        logging.getLogger("choreographer.utils").info("TemporaryDirectory.cleanup() worked.")
        logging.getLogger("qkviz.extraction").info("extracted 40 images")
        logging.getLogger("some_library").warning("a library's warning")
        return 0

    monkeypatch.setitem(qkviz.cli.COMMANDS, "status", command)
    result = run_main("status", "--run", "anywhere")
    assert result.stderr.splitlines() == ["qkviz: extracted 40 images", "qkviz: a library's warning"]


def test_tokens_lists_a_sentences_token_indices_for_explain(tiny_run):
    """Issue 49: the indices 'qkviz explain --query / --key' take, per sentence (run.token_rows, then the verb)."""
    run = tiny_run("llama")
    rows = run.sentence_tokens(2)
    table = run.token_rows(2)
    assert list(table.columns) == ["token_index", "position", "token", "is_special"]
    assert table.token_index.tolist() == list(range(rows.start, rows.stop))
    assert table.position.tolist() == list(range(rows.stop - rows.start))
    assert table.token.tolist() == run.tokens.token.iloc[rows].tolist()
    assert table.attrs == {"sentence": 2, "text": run.sentences.text.iat[2]}
    for bad, message in ((run.n_sentences, f"sentence {run.n_sentences} is out of range"), (-1, "out of range"),
                         ("2", "sentence must be a sentence number"), (True, "sentence must be a sentence number")):
        with pytest.raises(QkvizError, match=message):
            run.token_rows(bad)
    listed = qkviz("tokens", "--run", str(run.path), "--sentence", "2", check_rc=0).stdout.splitlines()
    assert listed[0].startswith(f"sentence 2: tokens {rows.start}-{rows.stop - 1} of the run") and "--query" in listed[0]
    assert listed[1] == " ".join(run.sentences.text.iat[2].split())
    assert listed[2].split() == ["index", "position", "token"] and len(listed) == 3 + rows.stop - rows.start
    for line, row in zip(listed[3:], table.itertuples()):
        assert line.split(maxsplit=2) == [str(row.token_index), str(row.position), repr(row.token)]
    assert_one_line_error(qkviz("tokens", "--run", str(run.path), "--sentence", str(run.n_sentences)),
                          f"sentence {run.n_sentences} is out of range")
    assert_one_line_error(qkviz("tokens", "--run", str(run.path), "--sentence", "-1"), "--sentence")
    assert_one_line_error(qkviz("tokens", "--run", str(run.path)), "--sentence")


def test_the_docs_name_every_command_and_every_method_of_a_run():
    """docs/cli.md's summary and sections name every command of the parser; docs/api.md's list of a run's methods
    names every public method and property that qkviz.Run adds to the stored run (issue 49: explain, ablate, circuit
    and tokens were missing)."""
    import argparse

    from support import REPO

    import qkviz.cli
    from qkviz.api import Run
    from qkviz.cli_parser import build_parser

    subcommands = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    assert set(subcommands.choices) == set(qkviz.cli.COMMANDS)
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    summary = page.split("```")[1].splitlines()
    for command in subcommands.choices:
        assert any(line.startswith(f"qkviz {command} ") for line in summary), command
        assert f"## `qkviz {command}`" in page, command
    api = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    for name in (name for name in vars(Run) if not name.startswith("_")):
        assert f"run.{name}" in api, name
