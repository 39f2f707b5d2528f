"""What every part of ``bench.search`` shares: how many partners a query asks for (:data:`K`), and how a call is
timed and its times summarised (p50 / p95 in milliseconds)."""

from __future__ import annotations

import time

import numpy as np

K = 10


def percentiles(values_ms: list[float]) -> str:
    values = np.asarray(values_ms)
    return f"p50 {np.percentile(values, 50):.2f} ms, p95 {np.percentile(values, 95):.2f} ms (n={len(values)})"


def spread(values_ms: list[float]) -> dict:
    """p50 / p95 / max (ms) and how many, as the result file holds them."""
    values = np.asarray(values_ms)
    return {"p50_ms": round(float(np.percentile(values, 50)), 3), "p95_ms": round(float(np.percentile(values, 95)), 3),
            "max_ms": round(float(values.max()), 3), "n": len(values)}


def timed(function, *args, **kwargs) -> tuple[float, object]:
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return 1e3 * (time.perf_counter() - start), result
