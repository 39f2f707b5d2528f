"""Hashes computed in background threads while the caller goes on (reading and hashing release the GIL): a run's
array files once written (:meth:`qkviz.store.run_writer.RunWriter.checksum_arrays`), a model's weights while the
corpus is tokenized (:func:`qkviz.extraction.writing.run_manifest.identity_in_background`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

Key = TypeVar("Key")
Result = TypeVar("Result")


def in_background(tasks: Mapping[Key, Callable[[], Result]], threads: int, name: str) -> dict[Key, Future]:
    """Each of ``tasks`` started on a pool of ``threads`` threads named ``name``, and its future by the same key. The
    pool is shut down at once without waiting: what was submitted still runs, and its threads end after it."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
    try:
        return {key: pool.submit(task) for key, task in tasks.items()}
    finally:
        pool.shutdown(wait=False)
