"""The server's model work -- the why panel's explanations and the ablate action -- off the request thread, shared
fairly between the pages that ask for it.

Explaining a pair runs the run's model over the pair's sequence(s) (about a second on a real model, plus its load
on first use, :func:`qkviz.probes.run_model`); ablating a head runs it twice over every sequence of the run (about
45 s on SmolLM2). A request never waits for either. A callback asks :meth:`ExplainWorker.ask` with a key, the
function that computes it and a :class:`Request` (the page's session, the kind of job, the panel and head it is
for, the longest sequence it runs): the answer is the result when it is ready, the one-line reason when it failed (a
:class:`qkviz.QkvizError`: the run's model cannot be found, the family is refused) or was refused (the server's
:class:`ModelLimits`), the one line "busy, N jobs ahead" when the page has :data:`PER_SESSION` jobs already, or
a pending answer while it waits (how many jobs run before it) or runs, after which the page polls
(:mod:`dash_app.panels.why`).

One daemon thread runs the jobs one at a time (the model is loaded once, and one pass at a time keeps the server's
cores for its requests), queued per page (its session id, :func:`checked_session`):

- the page served least recently goes next (a page not yet served first, as fq_codel serves new flows first), so
  one page's burst of ablations does not hold another page's explanation behind it;
- within a page, an explanation goes before its waiting ablations;
- a newer request for the same panel and head (:attr:`Request.slot`) replaces an older one still waiting;
- a page that has not asked for :data:`GONE_S` seconds (its panels poll while a job is pending) has gone: its
  waiting jobs are dropped before they start.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from qkviz import QkvizError

logger = logging.getLogger(__name__)

#: answers kept (results and failures), the least recently asked dropped first
KEPT = 64
#: jobs a page may have waiting or running at once: asking for a further one answers "busy"
PER_SESSION = 4
#: jobs waiting from every page together, at most (whatever the pages send, the queue's memory is bounded)
WAITING = 64
#: seconds without a request from a page after which its waiting jobs are dropped. The panels poll every second or
#: faster while a job is pending; a browser wakes the timers of a tab hidden for 5 minutes once a minute only
#: (Chrome's intensive throttling), so the limit is longer than that (a page that comes back asks again).
GONE_S = 90.0
#: the kinds of job, in the order a page's waiting jobs run
KINDS = ("explain", "ablate")
#: what a page's session id is: 32 hexadecimal digits (:func:`new_session`)
SESSION = re.compile(r"^[0-9a-f]{32}$")
#: the session of requests without a valid session id (scripts, tests, a forged value): one shared page
ANONYMOUS = ""
OFF = ("Explaining and ablating are off on this server (qkviz serve --no-model): they would run the model.")


def jobs_ahead(count: int) -> str:
    """``"1 job ahead"``, ``"3 jobs ahead"``."""
    return f"{count} job{'' if count == 1 else 's'} ahead"


def pending_work(answer: "Answer") -> str:
    """What a pending job is doing, in the panels' words: waiting behind others, loading the model (its first use, or
    after the model memory dropped it) then running it, or running it."""
    from qkviz.probes import model_loading

    if answer.ahead:
        return f"waiting, {jobs_ahead(answer.ahead)} of it on this server, then running the model"
    loading = model_loading()
    return f"loading the model ({loading}), then running it" if loading else "running the model"


def new_session() -> str:
    """A fresh page's session id (random, 128 bits)."""
    import secrets

    return secrets.token_hex(16)


def checked_session(value) -> str:
    """The session id the page sent, if it is one (:data:`SESSION`); else :data:`ANONYMOUS`."""
    return value if isinstance(value, str) and SESSION.match(value) else ANONYMOUS


@dataclass(frozen=True)
class ModelLimits:
    """What the server's model work may do: run the model at all (``model``; ``qkviz serve --no-model`` turns it
    off), and over sequences of at most ``max_tokens`` tokens (``--max-explain-tokens``; None: any)."""

    model: bool = True
    max_tokens: int | None = None

    def refusal(self, tokens: int) -> str | None:
        """The one line refusing a job that runs the model over sequences of up to ``tokens`` tokens; None: allowed."""
        if not self.model:
            return OFF
        if self.max_tokens is not None and tokens > self.max_tokens:
            return (f"This would run the model over a sequence of {tokens:,} tokens; this server runs at most "
                    f"{self.max_tokens:,} (qkviz serve --max-explain-tokens).")
        return None


@dataclass(frozen=True)
class Request:
    """Who asks for a job and what it is: the page's ``session`` (:func:`checked_session`), its ``kind`` (one of
    :data:`KINDS`), the ``slot`` it fills (the panel and head: a newer job for the same slot replaces one still
    waiting; None: none) and ``tokens``, the longest sequence it runs the model over (checked against the
    :class:`ModelLimits`)."""

    session: str = ANONYMOUS
    kind: str = "explain"
    slot: Hashable = None
    tokens: int = 0


@dataclass(frozen=True)
class Answer:
    """What :meth:`ExplainWorker.ask` knows of a key: its ``result``, or the ``error`` (one line) it failed with,
    or neither while it is being computed (``pending``): then ``ahead`` is how many jobs run before it (0: it is
    running; None: not known), or ``busy`` says (one line) that it could not be queued yet."""

    result: object = None
    error: str | None = None
    busy: str | None = None
    ahead: int | None = None

    @property
    def pending(self) -> bool:
        return self.result is None and self.error is None


PENDING = Answer()


@dataclass(frozen=True)
class _Job:
    key: Hashable
    compute: Callable[[], object]
    request: Request


class ExplainWorker:
    """One background thread running the model work asked for, fairly between pages, and the answers it has kept.
    ``limits``: what it may run (:class:`ModelLimits`); ``gone_s``: :data:`GONE_S`."""

    def __init__(self, limits: ModelLimits = ModelLimits(), gone_s: float = GONE_S):
        self.limits = limits
        self.gone_s = gone_s
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._answers: OrderedDict[Hashable, Answer] = OrderedDict()
        self._queues: dict[str, list[_Job]] = {}      # session -> its waiting jobs, in the order asked
        self._seen: dict[str, float] = {}             # session -> when it last asked (time.monotonic)
        self._served: dict[str, int] = {}             # session -> the turn its last job started
        self._turns = 0
        self._running: _Job | None = None
        self._thread: threading.Thread | None = None

    def ask(self, key: Hashable, compute: Callable[[], object], request: Request = Request()) -> Answer:
        """The answer for ``key``; when there is none yet, ``compute`` is queued (once) for ``request``'s page and
        a pending answer given (with the jobs ahead of it), or the one-line refusal (:class:`ModelLimits`: nothing is
        queued), or "busy"."""
        refusal = self.limits.refusal(request.tokens)
        if refusal is not None:
            return Answer(error=refusal)
        with self._lock:
            self._drop_gone()
            self._seen[request.session] = time.monotonic()
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
            if self._running is not None and self._running.key == key:
                return Answer(ahead=0)
            if any(job.key == key for queue in self._queues.values() for job in queue):
                return Answer(ahead=self._position(key))
            return self._queue(_Job(key, compute, request))

    def _queue(self, job: _Job) -> Answer:
        session = job.request.session
        queue = self._queues.setdefault(session, [])
        if job.request.slot is not None:
            queue[:] = [waiting for waiting in queue if waiting.request.slot != job.request.slot]   # replaced
        running = self._running is not None and self._running.request.session == session
        if len(queue) + running >= PER_SESSION or sum(map(len, self._queues.values())) >= WAITING:
            return Answer(busy=f"busy, {jobs_ahead(self._ahead(session))} (a page queues at most {PER_SESSION}); "
                               "asked again as they finish…")
        queue.append(job)
        self._start()
        self._wake.notify()
        return Answer(ahead=self._position(job.key))

    def _position(self, key: Hashable) -> int:
        """How many jobs run before ``key``'s (waiting): the running one, then those :meth:`_take` takes first."""
        queues = {session: list(queue) for session, queue in self._queues.items() if queue}
        served, turn, ahead = dict(self._served), self._turns, int(self._running is not None)
        while queues:
            session, job = _pick(queues, served)
            if job.key == key:
                break
            queues[session].remove(job)
            if not queues[session]:
                del queues[session]
            turn += 1
            served[session] = turn
            ahead += 1
        return ahead

    def _ahead(self, session: str) -> int:
        """Jobs that would run before one more of ``session``'s: the running one, and each page's first as many as
        ``session`` has waiting (one each per round)."""
        own = len(self._queues.get(session, ()))
        return (self._running is not None) + sum(min(len(queue), own) for queue in self._queues.values())

    def wait(self, key: Hashable, compute: Callable[[], object], timeout_s: float = 120.0,
             request: Request = Request()) -> Answer:
        """:meth:`ask` until the answer is in (for scripts and tests); :data:`PENDING` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        answer = self.ask(key, compute, request)
        while answer.pending and time.monotonic() < deadline:
            time.sleep(0.05)
            answer = self.ask(key, compute, request)
        return answer

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="qkviz-explain", daemon=True)
            self._thread.start()

    def _drop_gone(self) -> None:
        """Forget the pages that have not asked for :attr:`gone_s` seconds, and their waiting jobs."""
        since = time.monotonic() - self.gone_s
        for session in [session for session, seen in self._seen.items() if seen < since]:
            dropped = self._queues.pop(session, [])
            if dropped:
                logger.info("dropped %d waiting job(s) of a page gone for %.0f s", len(dropped), self.gone_s)
            del self._seen[session]
            self._served.pop(session, None)

    def _take(self) -> _Job | None:
        """The next job (under the lock): the least recently served page's, its first explanation before its
        ablations; None when nothing waits."""
        self._drop_gone()
        for session in [session for session, queue in self._queues.items() if not queue]:
            del self._queues[session]
        if not self._queues:
            return None
        session, job = _pick(self._queues, self._served)
        self._queues[session].remove(job)
        self._turns += 1
        self._served[session] = self._turns
        return job

    def _work(self) -> None:
        while True:
            with self._lock:
                job = self._take()
                while job is None:
                    self._wake.wait()
                    job = self._take()
                self._running = job
            answer = computed(job.key, job.compute)
            with self._lock:
                self._answers[job.key] = answer
                while len(self._answers) > KEPT:
                    self._answers.popitem(last=False)
                self._running = None


def _pick(queues: dict[str, list[_Job]], served: dict[str, int]) -> tuple[str, _Job]:
    """The next job of non-empty ``queues`` (session -> its waiting jobs) and its session: the session served least
    recently (``served``: session -> its last turn; never served first, then in the order they came), its first
    job of the earliest kind (:data:`KINDS`)."""
    session = min(queues, key=lambda name: served.get(name, -1))
    rank = {kind: place for place, kind in enumerate(KINDS)}
    return session, min(queues[session], key=lambda waiting: rank.get(waiting.request.kind, len(KINDS)))


def computed(key: Hashable, compute: Callable[[], object]) -> Answer:
    """``compute()``'s result, or the one line it failed with: a :class:`qkviz.QkvizError`'s first line; a file
    that cannot be read (a run or model directory deleted or moved while the server runs) named; anything else, a
    bug of ours, said so with the traceback in the log."""
    try:
        return Answer(result=compute())
    except QkvizError as error:
        return Answer(error=str(error).strip().splitlines()[0] if str(error).strip() else "failed")
    except OSError as error:
        logger.warning("%r: %s", key, error)
        where = f" {error.filename}" if error.filename else ""
        return Answer(error=f"cannot read{where} ({error.strerror or type(error).__name__}): was it deleted or moved "
                            "while the server runs?")
    except Exception as error:        # a bug of ours: the panel says so in one line, the log has the traceback
        logger.exception("explaining %r failed", key)
        return Answer(error=f"the explanation failed ({type(error).__name__}); the server's log has the details")
