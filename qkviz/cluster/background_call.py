"""One call run on a thread of its own while this thread waits on per-head work (:class:`BackgroundCall`)."""

from __future__ import annotations

import threading
from typing import Any, Callable


class BackgroundCall:
    """``work()`` started now on a daemon thread; :meth:`result` waits for it and returns what it returned, or raises
    what it raised. What ``qkviz.compute_stats`` runs the model's probes with while the heads' statistics run on the
    worker processes: the probes' time is then spent beside the workers' instead of before them. A daemon thread, so
    that Ctrl-C in this thread ends the process without waiting for it."""

    def __init__(self, work: Callable[[], Any], name: str = "qkviz-background"):
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(work,), name=name, daemon=True).start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self._result = work()
        except BaseException as error:      # handed to the caller of result(), in its thread
            self._error = error
        finally:
            self._done.set()

    def result(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result
