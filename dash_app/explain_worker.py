"""The why panel's explanations, computed off the request thread: one daemon thread runs the run's model.

Explaining a pair runs the run's model over the pair's sequence(s) (about a second on a real model, plus its load
on first use, :func:`qkviz.probes.run_model`); a request never waits for it. A callback asks
:meth:`ExplainWorker.ask` with a key and the function that computes it: the answer is the result when it is ready,
the one-line reason when it failed (a :class:`qkviz.QkvizError`: the run's model cannot be found, the family is
refused), or ``None`` while it is being computed, after which the page polls (:mod:`dash_app.panels.why`).
The ablate action (:mod:`dash_app.panels.ablation`) runs on the same worker. Jobs run one at a time in the order
asked (the model is loaded once, and one pass at a time keeps the server's cores for its requests); a job no longer
wanted (the panel moved on) is dropped before it starts.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from qkviz import QkvizError

logger = logging.getLogger(__name__)

#: answers kept (results and failures), the least recently asked dropped first
KEPT = 64
#: jobs waiting at most: asking for more drops the oldest waiting (the page has moved on from it)
WAITING = 4


@dataclass(frozen=True)
class Answer:
    """What :meth:`ExplainWorker.ask` knows of a key: its ``result``, or the ``error`` (one line) it failed with,
    or neither while it is being computed (``pending``)."""

    result: object = None
    error: str | None = None

    @property
    def pending(self) -> bool:
        return self.result is None and self.error is None


PENDING = Answer()


class ExplainWorker:
    """One background thread computing the explanations asked for, and the answers it has kept."""

    def __init__(self):
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._answers: OrderedDict[Hashable, Answer] = OrderedDict()
        self._waiting: OrderedDict[Hashable, Callable[[], object]] = OrderedDict()
        self._running: Hashable | None = None
        self._thread: threading.Thread | None = None

    def ask(self, key: Hashable, compute: Callable[[], object]) -> Answer:
        """The answer for ``key``; when there is none yet, ``compute`` is queued (once) and :data:`PENDING` given."""
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
            if key != self._running and key not in self._waiting:
                self._waiting[key] = compute
                while len(self._waiting) > WAITING:
                    self._waiting.popitem(last=False)
                self._start()
                self._wake.notify()
            return PENDING

    def wait(self, key: Hashable, compute: Callable[[], object], timeout_s: float = 120.0) -> Answer:
        """:meth:`ask` until the answer is in (for scripts and tests); :data:`PENDING` after ``timeout_s``."""
        import time

        deadline = time.monotonic() + timeout_s
        answer = self.ask(key, compute)
        while answer.pending and time.monotonic() < deadline:
            time.sleep(0.05)
            answer = self.ask(key, compute)
        return answer

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="qkviz-explain", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._waiting:
                    self._wake.wait()
                key, compute = self._waiting.popitem(last=False)
                self._running = key
            try:
                answer = Answer(result=compute())
            except QkvizError as error:
                answer = Answer(error=str(error).strip().splitlines()[0] if str(error).strip() else "failed")
            except Exception as error:        # a bug of ours: the panel says so in one line, the log has the traceback
                logger.exception("explaining %r failed", key)
                answer = Answer(error=f"the explanation failed ({type(error).__name__}); the server's log has the "
                                      "details")
            with self._lock:
                self._answers[key] = answer
                while len(self._answers) > KEPT:
                    self._answers.popitem(last=False)
                self._running = None
