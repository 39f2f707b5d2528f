"""A half-precision model, lifted to float32 for the exactness gate while the gate runs, and put back exactly.

In float16 or bfloat16 the model's own eager attention rounds its logits and probabilities to 8-11 bits: the
difference between it and a recomputation reaches 1e-2, the size of a term left out (about 1/40 over 40 keys),
so a gate in half precision cannot tell a missing term from rounding. The gate therefore runs the model's code
on float32 weights instead: every float16 / bfloat16 parameter and buffer is converted in place to float32 for
the gate's passes and converted back afterwards. Both conversions are exact (float32 holds every half-precision
value), so the model the run then captures is bit for bit the one the user gave, and the extra memory is the
difference between the two precisions (2 bytes per weight). Where that memory is not free, the gate compares in
the model's own precision, with the wider half-precision bound, and says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

import torch

logger = logging.getLogger(__name__)

HALF_DTYPES = (torch.float16, torch.bfloat16)
#: at most this share of the free memory may go to the float32 copy of the weights
FREE_MEMORY_SHARE = 0.5


def _half_tensors(model: torch.nn.Module) -> tuple[list[torch.nn.Parameter], list[tuple[dict, str, torch.Tensor]]]:
    """The model's half-precision parameters (each once, tied ones included) and buffers (where each is held)."""
    parameters = {id(p): p for p in model.parameters() if p.dtype in HALF_DTYPES}
    buffers = [(module._buffers, name, tensor) for module in model.modules()
               for name, tensor in module._buffers.items() if tensor is not None and tensor.dtype in HALF_DTYPES]
    return list(parameters.values()), buffers


def _free_bytes(device: torch.device) -> int:
    """Memory free for new tensors on ``device``: the GPU's free memory, or the system's available memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def float32_weights(model: torch.nn.Module) -> Iterator[torch.dtype]:
    """While the context lasts, ``model``'s half-precision weights are float32 (see the module); yields the
    precision the model then computes in: float32, or its own where it had no half weights or the float32
    weights would not fit."""
    parameters, buffers = _half_tensors(model)
    if not parameters and not buffers:
        yield next(model.parameters()).dtype
        return
    own = (parameters or [tensor for _, _, tensor in buffers])[0].dtype
    extra = 2 * (sum(p.numel() for p in parameters) + sum(t.numel() for _, _, t in buffers))
    free = _free_bytes(next(model.parameters()).device)
    if extra > FREE_MEMORY_SHARE * free:
        logger.warning("exactness gate: the model's float32 weights need %.1f GB more, %.1f GB is free; the gate "
                       "compares in the model's own %s, whose rounding hides a smaller error",
                       extra / 1e9, free / 1e9, str(own).removeprefix("torch."))
        yield own
        return
    dtypes = [p.dtype for p in parameters]
    try:
        for parameter in parameters:
            parameter.data = parameter.data.float()
        for store, name, tensor in buffers:
            store[name] = tensor.float()
        yield torch.float32
    finally:
        for parameter, dtype in zip(parameters, dtypes):
            parameter.data = parameter.data.to(dtype)
        for store, name, tensor in buffers:
            store[name] = tensor
