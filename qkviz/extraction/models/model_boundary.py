"""The one boundary around every pass qkviz makes through a model.

qkviz runs a model's own code in several steps of an extraction: discovering its attention layers, hashing its
weights for the run's identity, the exactness gate's two passes, the rotary-table and rotation-check passes of
the logit parts, the capture of every batch, the head-update probe. A family qkviz has never seen may fail in any
of them with whatever its code raises (a shape it did not expect, a cache it needs, a tensor view that cannot be
taken). Each step runs inside :func:`model_step`, which lets a :class:`~qkviz.core.errors.QkvizError` through as
it is and turns any other exception into a one-line refusal naming the family and the step. The pipeline runs
every step that can fail before it writes anything, and removes what the capture wrote of a fresh run when the
capture itself is refused (:func:`qkviz.extraction.writing.pipeline.write_run`), so a refusal leaves nothing behind.

An interrupt (Ctrl-C) or a kill is not a refusal: it passes through, and the interrupted run resumes; so does a
capture that ran out of memory (:class:`OutOfMemory`), with a smaller batch.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import torch

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option

logger = logging.getLogger(__name__)

#: the steps of an extraction that run the model's code, as the refusals name them
DISCOVERY = "finding its attention layers (a probe forward pass)"
IDENTITY = "hashing its weights and configuration"
GATE = "the exactness gate's forward passes"
LOGIT_PARTS = "reading its rotary tables and position embeddings (a forward pass)"
CAPTURE = "the capture of queries and keys (a forward pass)"
DETAIL_CHARACTERS = 160


def failure_detail(error: BaseException) -> str:
    """``Type: first line of the message``, at most :data:`DETAIL_CHARACTERS` characters of it."""
    detail = (str(error).strip().splitlines() or [""])[0][:DETAIL_CHARACTERS]
    return f"{type(error).__name__}: {detail}" if detail else type(error).__name__


class OutOfMemory(QkvizError):
    """A step ran out of memory: not the family's fault, and a capture that ran out keeps what it wrote, so that
    the same extraction with a smaller batch resumes."""


def refusal(family: str, step: str, error: BaseException) -> QkvizError:
    """The one-line refusal of ``family`` whose ``step`` raised ``error`` (memory running out is said as such)."""
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)):
        batch_size = option("batch_size", None)
        kept = (f"what was captured is kept: run it again with a lower {batch_size} and it resumes" if step == CAPTURE
                else f"nothing was written: lower {batch_size}")
        return OutOfMemory(f"{family}: {step} ran out of memory ({failure_detail(error)}); {kept}, or extract "
                           f"fewer tokens ({option('max_tokens', None)}) or shorter texts ({option('max_length', None)}, "
                           f"{option('chunk', None)})")
    return QkvizError(f"{family}: refused: {step} fails with this model's own code ({failure_detail(error)}); "
                      "qkviz cannot extract it exactly, and nothing was written")


@contextlib.contextmanager
def model_step(family: str, step: str) -> Iterator[None]:
    """Run one step of an extraction that calls the model's code: a :class:`QkvizError` passes as it is, any other
    exception (not an interrupt) becomes :func:`refusal`'s one line."""
    try:
        yield
    except QkvizError:
        raise
    except Exception as error:  # noqa: BLE001 -- the boundary: any failure of a model's own code
        logger.debug("%s: %s failed", family, step, exc_info=True)      # the model's traceback, for a bug report
        raise refusal(family, step, error) from None
