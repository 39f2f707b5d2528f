"""A sequence traced once answers its further pairs (``qkviz.explain.traced_streams``; issue 53, point 1).

* A cached answer is the uncached one within 1e-6 x max(1, |logit|): on five families (Llama, Gemma 3 with its
  QK-norm and post-norms, GPT-2's absolute positions, BERT's post-norm encoder, Falcon, whose pass changes a tensor
  in place), four layers each, pairs of two sequences at heads of every layer in an order that goes deeper and back,
  every split (pair, query, key, dimension) of each answer from a warm cache compared with the answer of an empty
  one, and with the answer of no cache at all (a pass at the pair's own tokens, as before the cache); a later pair
  of a sequence is counted as a hit.
* Another run of the same token ids (another model's), another sequence and another model object (the same weights)
  miss, and each answer is that run's own.
* The bound: room for one trace keeps one, the least recently used dropped and logged; a budget below one trace keeps
  none and answers the same.
* A model dropped is freed, and its traces with it; the app's why panel answers a second pair from the trace.
"""

from __future__ import annotations

import copy
import gc
import logging
import weakref

import numpy as np
import pytest
from support import CORPUS
from support.family_configs import family_runs, tiny_family_model
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz import QkvizError
from qkviz.explain import explain_pair_splits
from qkviz.explain.traced_streams import TRACES, clear_traces, set_trace_memory, trace_memory_state

LINES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:4]
LAYERS = 4
#: per family, the settings of its four-layer variant
FAMILIES = {"llama": {}, "gemma3_text": {"layer_types": ["sliding_attention", "full_attention"] * 2},
            "gpt2": {}, "bert": {}, "falcon": {}}


@pytest.fixture(autouse=True)
def fresh_traces(monkeypatch):
    monkeypatch.delenv("QKVIZ_TRACE_MEMORY", raising=False)
    set_trace_memory(None)
    clear_traces()
    yield
    set_trace_memory(None)
    clear_traces()


@pytest.fixture(scope="module")
def tokenizer():
    return decoder_tokenizer(LINES)


@pytest.fixture(scope="module")
def family_run(tokenizer, tmp_path_factory):
    return family_runs(LINES, tokenizer, tmp_path_factory,
                       lambda model_type: {"num_hidden_layers": LAYERS, **FAMILIES[model_type]})


def _asked(run) -> list[tuple[int, int, int, int]]:
    """``(layer, head, query, key)``: pairs of the first two sequences (keys the mask allows), heads at every layer,
    the layers in the order 1, 3, 0, 2, ... (deeper, then back)."""
    rng = np.random.default_rng(0)
    asked = []
    for sentence in (0, 1):
        rows = run.sentence_tokens(sentence)
        for layer in (1, LAYERS - 1, 0, 2):
            query = int(rng.integers(rows.start + 2, rows.stop))
            key = query - 1 if run.logit_rule(layer, 0).window else int(rng.integers(rows.start, query))
            asked.append((layer, int(rng.integers(run.n_heads)), query, key))
    return asked


def _same(found: dict, expected: dict) -> None:
    """Every split of ``found`` is ``expected``'s within 1e-6 x max(1, |logit|), row by row."""
    for by, frame in expected.items():
        logit = frame.attrs["logit"]
        bound = 1e-6 * max(1.0, abs(logit))
        other = found[by]
        assert abs(other.attrs["logit"] - logit) <= bound, (by, other.attrs["logit"], logit)
        columns = [column for column in frame.columns if column != "contribution"]   # the row's names (as text:
        mine = frame.set_index(list(frame[columns].astype(str).to_numpy().T)).contribution.sort_index()   # NaN bands)
        theirs = other.set_index(list(other[columns].astype(str).to_numpy().T)).contribution.sort_index()
        assert list(mine.index) == list(theirs.index), by
        assert float(np.abs(mine.to_numpy() - theirs.to_numpy()).max()) <= bound, by


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_cached_answer_is_the_uncached_one(model_type, family_run):
    model, run = family_run(model_type)
    asked = _asked(run)
    warm = [explain_pair_splits(run, *pair, model=model) for pair in asked]
    state = trace_memory_state()
    # the first pair of each sequence traces it, the second goes deeper (traced again, to the last layer), the rest hit
    assert (state["misses"], state["hits"]) == (4, 4), state
    assert len(state["held"]) == 2 and 0 < state["used"] <= state["budget"]
    for pair, cached in zip(asked, warm):
        clear_traces()
        _same(cached, explain_pair_splits(run, *pair, model=model))
    set_trace_memory(0)                 # no cache at all: a pass at the pair's own tokens
    for pair, cached in zip(asked, warm):
        _same(cached, explain_pair_splits(run, *pair, model=model))
    assert trace_memory_state()["held"] == []


def test_another_run_sequence_or_model_misses(family_run):
    model, run = family_run("llama")
    other_model, other_run = family_run("llama", seed=1)      # other weights, the same token ids
    assert run.tokens.token_id.tolist() == other_run.tokens.token_id.tolist()
    layer, head, query, key = _asked(run)[0]
    explain_pair_splits(run, layer, head, query, key, model=model)
    answer = explain_pair_splits(other_run, layer, head, query, key, model=other_model)
    assert trace_memory_state()["hits"] == 0
    clear_traces()
    _same(answer, explain_pair_splits(other_run, layer, head, query, key, model=other_model))
    assert answer["pair"].attrs["logit"] != pytest.approx(
        explain_pair_splits(run, layer, head, query, key, model=model)["pair"].attrs["logit"])
    hits = trace_memory_state()["hits"]
    second = run.sentence_tokens(1)
    explain_pair_splits(run, layer, head, second.start + 3, second.start + 1, model=model)     # another sequence
    twin = copy.deepcopy(model)                                                                 # another object
    explain_pair_splits(run, layer, head, query, key, model=twin)
    assert trace_memory_state()["hits"] == hits
    explain_pair_splits(run, layer, head, query, key - 1, model=model)
    assert trace_memory_state()["hits"] == hits + 1


def test_the_budget_keeps_the_most_recent_and_logs_what_it_drops(family_run, caplog):
    model, run = family_run("llama")
    (layer, head, query, key), *_ = _asked(run)
    second = run.sentence_tokens(1)
    explain_pair_splits(run, LAYERS - 1, head, query, key, model=model)
    one = trace_memory_state()["used"]
    set_trace_memory(one + one // 2)                                      # room for one trace
    with caplog.at_level(logging.INFO, logger="qkviz.explain.traced_streams"):
        explain_pair_splits(run, LAYERS - 1, head, second.start + 3, second.start + 1, model=model)
        assert trace_memory_state()["held"] == [f"run sequence 1 ({second.stop - second.start:,} tokens)"]
        assert "dropped run sequence 0" in caplog.text and "least recently used" in caplog.text
        explain_pair_splits(run, LAYERS - 1, head, second.start + 4, second.start + 2, model=model)
        assert "answered from its trace" in caplog.text
    expected = explain_pair_splits(run, layer, head, query, key, model=model)
    set_trace_memory(1000)                                                # room for none
    assert trace_memory_state()["held"] == []
    clear_traces()
    _same(explain_pair_splits(run, layer, head, query, key, model=model), expected)
    assert trace_memory_state()["held"] == []


def test_a_dropped_model_is_freed_with_its_traces(tokenizer, tmp_path):
    model = tiny_family_model("llama", 5, num_hidden_layers=LAYERS)
    run = qkviz.extract(model, LINES, tmp_path / "run", tokenizer=tokenizer, progress=False)
    layer, head, query, key = _asked(run)[0]
    explain_pair_splits(run, layer, head, query, key, model=model)
    assert len(trace_memory_state()["held"]) == 1
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None
    assert trace_memory_state()["held"] == []


def test_the_why_panel_answers_a_second_pair_from_the_trace(tmp_path):
    from dash_app.explain_worker import ExplainWorker
    from dash_app.panels import why
    from dash_app.data.run_data import RunData

    model = tiny_family_model("llama", 7, num_hidden_layers=LAYERS)
    directory = tmp_path / "model"
    model.save_pretrained(directory)
    decoder_tokenizer(LINES).save_pretrained(directory)
    run = qkviz.extract(str(directory), LINES, directory / "run", progress=False)
    data = RunData(qkviz.open_run(run.path), run.path.name)
    rows = run.sentence_tokens(0)
    for layer, query, key in ((2, rows.stop - 1, rows.start + 1), (1, rows.stop - 2, rows.start + 2)):
        subject = why.Subject("pair", 0, layer, 0, (query,), (key,))
        answer = ExplainWorker().wait(subject, lambda subject=subject: why.explain(data, subject))
        assert not answer.pending and answer.error is None, answer.error
    assert (trace_memory_state()["misses"], trace_memory_state()["hits"]) == (1, 1)


@pytest.mark.parametrize("budget", ["lots", "-1M", -5, 1.5, True])
def test_a_bad_budget_is_one_line(budget):
    with pytest.raises(QkvizError) as refused:
        set_trace_memory(budget)
    assert "\n" not in str(refused.value) and "trace memory budget" in str(refused.value)


def test_the_environment_sets_the_budget(monkeypatch):
    monkeypatch.setenv("QKVIZ_TRACE_MEMORY", "3M")
    assert TRACES.budget == 3 << 20
    monkeypatch.setenv("QKVIZ_TRACE_MEMORY", "nonsense")
    with pytest.raises(QkvizError, match="QKVIZ_TRACE_MEMORY"):
        TRACES.budget
    monkeypatch.delenv("QKVIZ_TRACE_MEMORY")
