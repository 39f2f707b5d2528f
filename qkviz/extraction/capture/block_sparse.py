"""BigBird's block-sparse attention, and the sequences within which BigBird's own code attends in full instead.

A BigBird configured ``attention_type='block_sparse'`` attends to a window, global and random blocks of keys: a mask
qkviz does not store. Its own forward pass, though, switches the model to full attention (``original_full``: plain
``softmax(q . k / sqrt(d) + mask)``, captured where its own code multiplies queries by keys) whenever a batch is no
longer than the keys block-sparse attention would reach anyway: ``(5 + 2 * num_random_blocks) * block_size`` tokens
(two global, three sliding and the random blocks, with as many again as a buffer), and stays switched.

qkviz pads every batch to its longest sequence, so a run whose sequences all fit in that span is attended in full
throughout, exactly: a longer document is refused in one line with its count before anything runs (``--chunk``
splits it into windows that fit, ``--max-length`` truncates it). qkviz makes the switch the model's own code would
make on the first batch before its first pass (:func:`attending_in_full`), so that the attention modules it watches
are the full-attention ones, and refuses in one line any pass longer than the span, so that block-sparse attention
never runs unseen. What the configuration says (whether it is block-sparse, and the span) is read by
:func:`qkviz.extraction.families.full_attention_span`, which the adapters' length limit reads too.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import torch

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.extraction.families import BLOCK_SPARSE, full_attention_span, span_name

logger = logging.getLogger(__name__)

FULL = "original_full"


def _block_sparse_model(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module of ``model`` that switches its attention type (BigBird's base model), where it is block-sparse."""
    return next((module for module in model.modules() if getattr(module, "attention_type", None) == BLOCK_SPARSE
                 and callable(getattr(module, "set_attention_type", None))
                 and full_attention_span(getattr(module, "config", None)) is not None), None)


@contextlib.contextmanager
def attending_in_full(model: torch.nn.Module) -> Iterator[None]:
    """While the context lasts, a block-sparse BigBird ``model`` attends in full, as its own code makes it on a
    sequence within :func:`full_attention_span`; a pass over a longer sequence is refused in one line. Any other
    model is left as it is."""
    switching = _block_sparse_model(model)
    config = model.config if switching is None else switching.config
    span = full_attention_span(config)
    if span is None:
        yield
        return
    if switching is not None:
        logger.info("%s: block-sparse attention switched to full attention, as its own code does for sequences of "
                    "at most %d tokens", type(switching).__name__, span)
        switching.set_attention_type(FULL)

    def refuse_longer(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        if isinstance(ids, torch.Tensor) and ids.dim() >= 2 and ids.shape[1] > span:
            raise QkvizError(f"{config.model_type}: a sequence of {ids.shape[1]:,} tokens is longer than "
                             f"{span_name(config)}; qkviz passes at most {span:,} ({option('chunk', span)})")

    hook = model.register_forward_pre_hook(refuse_longer, with_kwargs=True)
    try:
        yield
    finally:
        hook.remove()
