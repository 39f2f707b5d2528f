"""How much each head's attention changed between two runs: against scipy's JS distance, a run with itself,
runs that cannot be compared, and ``qkviz compare``."""

import numpy as np
import pandas as pd
import pytest
from scipy.spatial.distance import jensenshannon
from support.cli import run_main

import qkviz
from qkviz.analysis import attention_change, check_comparable


def direct_change(run_a, run_b) -> pd.DataFrame:
    """Per head, scipy's base-2 JS distance between the two runs' attention rows of every query, sentence by
    sentence through ``run.attention``: its mean and median."""
    rows = []
    for layer in range(run_a.n_layers):
        for head in range(run_a.n_heads):
            distances = []
            for sentence in range(run_a.n_sentences):
                p, q = run_a.attention(layer, head, sentence), run_b.attention(layer, head, sentence)
                distances += [jensenshannon(p_row, q_row, base=2) for p_row, q_row in zip(p, q)]
            rows.append((layer, head, np.mean(distances), np.median(distances), len(distances)))
    return pd.DataFrame(rows, columns=["layer", "head", "mean_js", "median_js", "n_queries"])


# an encoder; a decoder with grouped keys and a sliding window; one with a window on some layers only and its
# own query scale
@pytest.mark.parametrize("family", ["bert", "mistral", "gemma3"])
def test_attention_change_equals_scipy_on_every_head(tiny_run, reseeded_run, family):
    run_a, run_b = tiny_run(family), reseeded_run(family)
    # small batches: several per head, so that batching and padding are exercised
    table = attention_change(run_a, run_b, max_cells=300, progress=False)
    expected = direct_change(run_a, run_b)
    assert list(table.columns) == list(expected.columns)
    assert (table[["layer", "head", "n_queries"]].to_numpy() == expected[["layer", "head", "n_queries"]].to_numpy()).all()
    assert np.allclose(table.mean_js, expected.mean_js, atol=1e-9)
    assert np.allclose(table.median_js, expected.median_js, atol=1e-9)
    assert (table.n_queries == run_a.n_tokens).all()
    assert (table.mean_js > 0.01).all() and (table.mean_js <= 1).all()


def test_a_run_with_itself_is_zero_and_another_model_is_not(tiny_run):
    llama, mistral = tiny_run("llama"), tiny_run("mistral")        # the same tokenizer, other weights and masks
    same = qkviz.attention_change(llama, llama.path, progress=False)
    assert (same.mean_js == 0).all() and (same.median_js == 0).all()
    other = qkviz.attention_change(llama, mistral, progress=False)
    assert (other.mean_js > 0.01).all()
    assert np.allclose(other.mean_js, qkviz.attention_change(mistral, llama, progress=False).mean_js, atol=1e-12)


def test_runs_over_other_tokens_or_shapes_are_refused(tiny_run):
    llama = tiny_run("llama")
    cases = [(tiny_run("llama", max_sentences=10), "sentence count differs (12 in"),
             (tiny_run("llama", seed=1), "token"),                 # other sentences drawn: other tokens
             (tiny_run("bert"), "token"),
             (tiny_run("gemma3"), "different shapes")]             # 3 layers
    for other, words in cases:
        with pytest.raises(qkviz.QkvizError, match="cannot compare") as error:
            check_comparable(llama, other)
        assert words in str(error.value) and "\n" not in str(error.value)


def test_compare_command_prints_the_most_changed_heads_and_writes_the_table(tiny_run, reseeded_run, tmp_path):
    run_a, run_b = tiny_run("llama"), reseeded_run("llama")
    out = tmp_path / "change" / "table.csv"
    done = run_main("-q", "compare", "--run", run_a.path, "--run", run_b.path, "--out", out, "--top", "3")
    assert done.returncode == 0, done.stderr
    written = pd.read_csv(out)
    expected = attention_change(run_a, run_b, progress=False)
    assert np.allclose(written.mean_js, expected.mean_js) and len(written) == run_a.n_layers * run_a.n_heads
    printed = [line.split() for line in done.stdout.splitlines()[2:5]]
    top = expected.sort_values("mean_js", ascending=False, kind="stable").head(3)
    assert [(int(row[0]), int(row[1])) for row in printed] == list(zip(top["layer"], top["head"]))

    for args, words in ((["--run", run_a.path], "exactly two runs"),
                        (["--run", run_a.path, "--run", tiny_run("bert").path], "cannot compare runs over different tokens"),
                        (["--run", run_a.path, "--run", run_b.path, "--out", tmp_path / "t.txt"], "must name a .csv")):
        failed = run_main("-q", "compare", *args)
        assert failed.returncode == 2 and words in failed.stderr
        assert failed.stderr.count("\n") == 1 and "Traceback" not in failed.stderr
