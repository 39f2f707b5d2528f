"""qkviz: what every attention head of a transformer does, from its own queries and keys.

The core (run store, attention recomputation) imports without torch; extraction imports torch
and transformers only when called.
"""

from qkviz.core.errors import QkvizError
from qkviz.store.run import Run, open_run

__version__ = "0.1.0"


def extract(*args, **kwargs):
    """See :func:`qkviz.extraction.pipeline.extract` (imported lazily: it needs torch)."""
    from qkviz.extraction.pipeline import extract as _extract

    return _extract(*args, **kwargs)


def correlation_table(run, **kwargs):
    """See :func:`qkviz.analysis.correlation.correlation_table`: every head's distance-dot-product correlations."""
    from qkviz.analysis.correlation import correlation_table as _correlation_table

    return _correlation_table(run, **kwargs)


__all__ = ["QkvizError", "Run", "__version__", "correlation_table", "extract", "open_run"]
