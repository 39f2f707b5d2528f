"""The models qkviz runs itself: nothing kept that the user dropped, and the models it loads kept under a memory
budget (issue 52, points 1, 2 and the memory faults of 5).

* Notebook: six models with different weights, each extracted, explained with ``model=`` and dropped: after a garbage
  collection at most the last one is alive (weak references count them).
* Serving: three runs of three different tiny models, each explained through the app's why panel, with a budget of
  two models: never more than two held (the cache counts them), the least recently used dropped and reloaded when
  asked again, each load and drop logged.
* Faults: a budget smaller than one model refuses it in one line without loading it, and does not try again; an
  out-of-memory while loading is one line, and not retried in a loop.
"""

from __future__ import annotations

import gc
import logging
import weakref

import pytest
import torch
import transformers
from support.family_configs import tiny_family_config
from support.tiny_models import decoder_tokenizer

import qkviz
from qkviz import QkvizError
from qkviz.probes import model_cache
from qkviz.probes.model_cache import MODELS, parse_memory, set_default_model_memory, set_model_memory

SENTENCES = 3


@pytest.fixture(autouse=True)
def fresh_memory(monkeypatch):
    """Each test starts with nothing held and no budget set (nor a server's default), and leaves it so."""
    monkeypatch.delenv(model_cache.MEMORY_VARIABLE, raising=False)
    MODELS.clear()
    set_model_memory(None)
    set_default_model_memory(None)
    yield
    MODELS.clear()
    set_model_memory(None)
    set_default_model_memory(None)


def _tiny_llama(seed: int):
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(tiny_family_config("llama"), dtype=torch.float32).eval()


def _pair(run) -> tuple[int, int]:
    rows = run.sentence_tokens(0)
    return rows.stop - 1, rows.start + 1


def _refused_each_time(run, attempts: int, says: str) -> None:
    """``run.explain`` of a pair, ``attempts`` times: refused each time in one line that says ``says``."""
    query, key = _pair(run)
    for _attempt in range(attempts):
        with pytest.raises(QkvizError) as refused:
            run.explain(1, 0, query, key)
        assert says in str(refused.value) and "\n" not in str(refused.value)


def test_six_models_explained_then_dropped_leave_at_most_the_last_alive(tmp_path, corpus_sentences):
    tokenizer = decoder_tokenizer(corpus_sentences)
    alive, runs = [], []                                   # the runs stay open: a run keeps no model
    for seed in range(6):
        model = _tiny_llama(seed)
        run = qkviz.extract(model, corpus_sentences[:SENTENCES], tmp_path / f"run{seed}", tokenizer=tokenizer,
                            progress=False)
        query, key = _pair(run)
        assert len(run.explain(1, 0, query, key, model=model.model)) > 0       # the base model, as extracted
        run.ablate(1, 0, model=model, sentences=[0])
        alive.append(weakref.ref(model))
        runs.append(run)
        del model, run
        gc.collect()
    living = [seed for seed, reference in enumerate(alive) if reference() is not None]
    assert len(living) <= 1 and set(living) <= {5}, living


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory, corpus_sentences):
    """Three runs, each of its own tiny model saved to a directory (what a server loads by itself)."""
    runs = []
    for seed in range(3):
        directory = tmp_path_factory.mktemp(f"model{seed}")
        model = _tiny_llama(10 + seed)
        model.save_pretrained(directory)
        decoder_tokenizer(corpus_sentences).save_pretrained(directory)
        runs.append(qkviz.extract(str(directory), corpus_sentences[:SENTENCES], directory / "run", progress=False))
    return runs


def _explained_in_the_app(run) -> None:
    from dash_app.explain_worker import ExplainWorker
    from dash_app.panels import why
    from dash_app.data.run_data import RunData

    data = RunData(qkviz.open_run(run.path), run.path.name)
    query, key = _pair(run)
    subject = why.Subject("pair", 0, 1, 0, (query,), (key,))
    answer = ExplainWorker().wait(subject, lambda: why.explain(data, subject))
    assert not answer.pending and answer.error is None, answer.error


def test_serving_three_models_keeps_at_most_the_budgets_models(three_runs, caplog):
    size = model_cache.model_bytes(_tiny_llama(0))
    set_model_memory(int(2.5 * size))                  # room for two
    held = []
    with caplog.at_level(logging.INFO, logger="qkviz.probes.model_cache"):
        for run in [*three_runs, three_runs[0]]:        # the first again: it was dropped, so it is loaded again
            _explained_in_the_app(run)
            held.append(len(MODELS.keys()))
            assert MODELS.used <= MODELS.budget
    assert max(held) == 2 and held == [1, 2, 2, 2], held
    specs = [key[0] for key in MODELS.keys()]
    assert specs == [str(three_runs[2].manifest["model"]["id"]), str(three_runs[0].manifest["model"]["id"])]
    logged = caplog.text
    assert logged.count("model memory: loaded") == 4 and logged.count("model memory: dropped") == 2


@pytest.fixture
def loads(monkeypatch) -> list:
    """Every load of a model qkviz makes itself, as it happens (the real loader still loads)."""
    import qkviz.extraction as extraction

    made, real = [], extraction.load_model
    monkeypatch.setattr(extraction, "load_model", lambda *a, **k: made.append(a) or real(*a, **k))
    return made


def test_a_model_over_the_budget_is_refused_in_one_line_and_never_loaded(three_runs, loads):
    set_model_memory(1000)                              # bytes: smaller than any model
    _refused_each_time(three_runs[0], 2, "more than the model memory budget")
    assert loads == [] and MODELS.keys() == []


def test_running_out_of_memory_while_loading_is_one_line_and_not_retried(three_runs, monkeypatch):
    import qkviz.extraction as extraction

    loads = []

    def out_of_memory(*args, **kwargs):
        loads.append(args)
        raise MemoryError
    monkeypatch.setattr(extraction, "load_model", out_of_memory)
    _refused_each_time(three_runs[1], 3, "did not fit in memory while loading")
    assert len(loads) == 1


def test_the_budget_is_read_as_a_size(monkeypatch):
    assert parse_memory("4G") == 4 << 30 and parse_memory("512m") == 512 << 20 and parse_memory("2000") == 2000
    assert parse_memory("1.5GB") == int(1.5 * (1 << 30))
    for bad in ("", "lots", "-1G", "0"):
        with pytest.raises(QkvizError, match="positive size"):
            parse_memory(bad)
    monkeypatch.setenv(model_cache.MEMORY_VARIABLE, "3M")
    assert MODELS.budget == 3 << 20


def test_the_server_keeps_twice_its_largest_model_unless_told(three_runs):
    from dash_app.data.run_data import RunData
    from dash_app.server import _model_budget

    from qkviz.probes import model_memory_budget, served_model_memory

    sizes = [model_cache.estimated_bytes(run.manifest["model"]["id"]) for run in three_runs]      # their directories
    assert min(sizes) > 0
    assert served_model_memory(three_runs) == 2 * max(sizes)
    loaded = model_cache.model_bytes(_tiny_llama(0))
    assert abs(max(sizes) - loaded) <= 0.01 * loaded                 # the estimate is the loaded size (float32)
    runs = [RunData(qkviz.open_run(run.path), run.path.name) for run in three_runs]
    _model_budget(runs, None)
    assert model_memory_budget() == 2 * max(sizes)
    _model_budget(runs, 12345)                                        # --model-memory
    assert model_memory_budget() == 12345


def test_the_panel_says_it_is_loading_the_model_while_it_loads(three_runs, monkeypatch):
    import threading

    import qkviz.extraction as extraction
    from dash_app.explain_worker import PENDING
    from dash_app.panels import why
    from dash_app.data.run_data import RunData
    from support.component_tree import texts

    real, release, started = extraction.load_model, threading.Event(), threading.Event()

    def slow(*args, **kwargs):
        started.set()
        release.wait(30)
        return real(*args, **kwargs)
    monkeypatch.setattr(extraction, "load_model", slow)
    run = three_runs[2]
    query, key = _pair(run)
    worker = threading.Thread(target=run.explain, args=(1, 0, query, key))
    worker.start()
    try:
        assert started.wait(30)
        data = RunData(qkviz.open_run(run.path), run.path.name)
        words = " ".join(texts(why.render(data, why.Subject("pair", 0, 1, 0, (query,), (key,)), PENDING)))
        assert "loading the model" in words, words
    finally:
        release.set()
        worker.join(60)
    assert qkviz.probes.model_loading() is None


def test_in_the_server_a_model_over_the_budget_is_one_line_and_the_worker_goes_on(three_runs, loads):
    from dash_app.explain_worker import ExplainWorker
    from dash_app.panels import why
    from dash_app.data.run_data import RunData

    worker = ExplainWorker()
    first = RunData(qkviz.open_run(three_runs[0].path), "first")
    query, key = _pair(three_runs[0])
    set_model_memory(1000)                                  # smaller than any model
    refused = why.Subject("pair", 0, 1, 0, (query,), (key,))
    answer = worker.wait(refused, lambda: why.explain(first, refused))
    assert answer.error is not None and "model memory budget" in answer.error and "\n" not in answer.error
    set_model_memory(None)                                  # the operator raises it: the next request is served
    served = why.Subject("pair", 0, 1, 1, (query,), (key,))
    answer = worker.wait(served, lambda: why.explain(first, served))
    assert answer.error is None and not answer.pending
    assert len(loads) == 1                                  # the refused model was never loaded
