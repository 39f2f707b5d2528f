"""The one per-head executor, :class:`qkviz.cluster.HeadRunner`, on its local pool: persistent across runs, each
worker started once by the initializer (the app's background at a lower priority), a dead worker one line."""

import os

import pytest

from qkviz.cluster import HeadRunner, HeadTask
from qkviz.core.errors import QkvizError
from qkviz.projection import projection_runner
from qkviz.projection.background import BACKGROUND_NICENESS


def test_the_background_pool_is_persistent_and_nicer_than_the_app(tiny_run):
    with projection_runner(tiny_run("llama"), niceness=BACKGROUND_NICENESS,
                           always_pool=True) as runner:         # one job, in a worker process all the same
        assert [niceness for _, niceness in runner.run(os.nice, [HeadTask(0, 0, (0,))])] == [os.nice(0) + 10]
        first = {pid for _, pid in runner.run(os.getpid, [HeadTask(0, head, ()) for head in range(3)])}
        again = {pid for _, pid in runner.run(os.getpid, [HeadTask(1, head, ()) for head in range(3)])}
    assert len(first) == 1 and first == again and os.getpid() not in first


def test_one_job_runs_here_in_task_order(tiny_run):
    with HeadRunner(tiny_run("llama"), "stats") as runner:
        assert list(runner.run(os.getpid, [HeadTask(0, head, ()) for head in range(2)])) == [(0, os.getpid()),
                                                                                            (1, os.getpid())]


def test_a_worker_that_dies_is_one_line_naming_the_head(tiny_run):
    with HeadRunner(tiny_run("llama"), "stats", always_pool=True) as runner:     # never os._exit here
        with pytest.raises(QkvizError, match="a worker process ended while running layer 1 head 2's stats task "
                                             r"\(out of memory\?\): run with fewer jobs"):
            list(runner.run(os._exit, [HeadTask(1, 2, (3,))]))
