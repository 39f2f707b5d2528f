"""The model work's queue (:class:`dash_app.explain_worker.ExplainWorker`) with fake jobs: the page served least
recently goes next, a page's explanation before its ablations, a newer job for the same panel and head replaces a
waiting one, a gone page's jobs are dropped, a full page is told "busy", the limits refuse before anything is
queued, and a session id is checked."""

from __future__ import annotations

import threading
import time

import pytest

from dash_app.explain_worker import (ANONYMOUS, OFF, PER_SESSION, ExplainWorker, ModelLimits, Request,
                                     checked_session, new_session)


class Held:
    """A worker whose first job ("hold") waits until :meth:`release`; every job records its key when it runs."""

    def __init__(self, **options):
        self.worker, self.ran, self.gate = ExplainWorker(**options), [], threading.Event()
        self.worker.ask("hold", self.job("hold", self.gate.wait), Request("h" * 32))
        deadline = time.monotonic() + 10
        while not self.ran and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.ran == ["hold"]

    def job(self, key, then=None):
        def run():
            self.ran.append(key)
            if then is not None:
                then()
            return key
        return run

    def ask(self, key, request: Request):
        return self.worker.ask(key, self.job(key), request)

    def release(self, expected: int) -> list:
        """Let the held job end; the keys run after it, once ``expected`` have."""
        self.gate.set()
        deadline = time.monotonic() + 10
        while len(self.ran) < expected + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        return self.ran[1:]


def test_the_page_served_least_recently_goes_next_and_its_explanation_first():
    held = Held()
    first, second = new_session(), new_session()
    # each answer says how many jobs run before it: the held one, then those taken first
    assert [held.ask(("a", head), Request(first, "ablate", ("ablate", head))).ahead for head in range(3)] == [1, 2, 3]
    assert held.ask(("b", 0), Request(second, "ablate", ("ablate", 0))).ahead == 2          # a0, then b0
    assert held.ask(("b", 1), Request(second, "ablate", ("ablate", 1))).ahead == 4          # a0 b0 a1, then b1
    assert held.ask(("a", "why"), Request(first, "explain", ("why", 0))).ahead == 1         # before a0
    assert held.worker.ask("hold", None).ahead == 0                                         # running
    # neither page served yet: in the order they came; then each in turn, the first's explanation before its ablations
    assert held.release(6) == [("a", "why"), ("b", 0), ("a", 0), ("b", 1), ("a", 1), ("a", 2)]
    assert held.worker.ask(("a", 0), None).result == ("a", 0)                    # kept, shared by every page


def test_a_newer_job_for_the_same_panel_and_head_replaces_the_waiting_one():
    held = Held()
    page = new_session()
    held.ask("old pair", Request(page, "explain", ("why", "single", 0, 1, 2)))
    held.ask("other head", Request(page, "explain", ("why", "single", 0, 1, 3)))
    held.ask("new pair", Request(page, "explain", ("why", "single", 0, 1, 2)))
    assert held.release(2) == ["other head", "new pair"]


def test_a_full_page_is_busy_and_others_are_not():
    held = Held()
    page, other = new_session(), new_session()
    for head in range(PER_SESSION):
        assert held.ask(head, Request(page, "ablate", ("ablate", head))).pending
    busy = held.ask("fifth", Request(page, "ablate", ("ablate", "fifth")))
    assert busy.pending and busy.busy.startswith(f"busy, {PER_SESSION + 1} jobs ahead") and "\n" not in busy.busy
    assert held.ask("theirs", Request(other, "explain")).ahead == 2             # the held job, the page's first
    held.release(PER_SESSION + 1)
    assert "fifth" not in held.ran                                                 # never queued: asked again later


def test_a_gone_pages_jobs_are_dropped_before_they_start():
    held = Held(gone_s=2.0)
    gone, staying = new_session(), new_session()
    held.ask("gone's", Request(gone, "ablate"))
    held.ask("staying's", Request(staying, "ablate"))
    time.sleep(1.2)
    held.ask("staying's", Request(staying, "ablate"))                              # its poll: it is still there
    time.sleep(1.2)
    assert held.release(1) == ["staying's"]


def test_the_limits_refuse_in_one_line_before_anything_is_queued():
    ran = []
    refused = ExplainWorker(ModelLimits(model=False)).ask("x", lambda: ran.append(1), Request(tokens=1))
    assert refused.error == OFF and "\n" not in OFF
    capped = ExplainWorker(ModelLimits(max_tokens=10))
    long = capped.ask("x", lambda: ran.append(1), Request(tokens=11))
    assert "11 tokens" in long.error and "at most 10" in long.error
    assert capped.wait("y", lambda: "in", request=Request(tokens=10)).result == "in"
    assert ran == []


@pytest.mark.parametrize("value", [None, "", "x" * 32, "A" * 32, "0" * 31, "0" * 33, 7, ["0" * 32], {"a": 1}])
def test_a_session_id_that_is_not_one_is_the_anonymous_page(value):
    assert checked_session(value) == ANONYMOUS
    fresh = new_session()
    assert checked_session(fresh) == fresh and fresh != new_session()
