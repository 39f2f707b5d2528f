"""Advisory locks: a second writer of the same run, or of the same converted model, waits or is refused."""

import multiprocessing
import time

import pytest

import qkviz
from qkviz.store.locks import exclusive_lock


def _hold(path, seconds, ready):
    with exclusive_lock(path):
        ready.set()
        time.sleep(seconds)


def test_a_lock_held_elsewhere_is_refused_without_waiting_and_waited_for_with(tmp_path):
    path = tmp_path / "thing.lock"
    ready = multiprocessing.get_context("spawn").Event()
    holder = multiprocessing.get_context("spawn").Process(target=_hold, args=(path, 1.5, ready))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(qkviz.QkvizError, match="busy here"):
            with exclusive_lock(path, wait=False, busy_message="busy here"):
                pass
        started = time.monotonic()
        with exclusive_lock(path):           # waits until the holder lets go
            assert time.monotonic() - started > 0.2
    finally:
        holder.join(30)
    with exclusive_lock(path, wait=False):   # free again, and re-entrant after release
        pass


def test_a_second_extraction_into_the_same_run_is_refused_in_one_line(tiny_model, tiny_corpus, tmp_path):
    out = tmp_path / "run"
    with exclusive_lock(tmp_path / ".run.lock"):   # what a running 'qkviz extract --out run' holds
        with pytest.raises(qkviz.QkvizError, match="another qkviz extract is writing") as error:
            qkviz.extract(str(tiny_model("bert")), tiny_corpus, out, max_sentences=3, progress=False)
    assert "\n" not in str(error.value) and not out.exists()
    assert qkviz.extract(str(tiny_model("bert")), tiny_corpus, out, max_sentences=3, progress=False).n_sentences == 3
