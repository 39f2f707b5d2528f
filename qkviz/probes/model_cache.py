"""The models qkviz loads itself (a run's own model, for explanations, probes and ablation), kept under a memory
budget: the least recently used goes first, and a dropped model is reloaded when next needed.

The budget, in bytes, is the first of: :func:`set_model_memory` (``qkviz serve --model-memory``), the environment
variable ``QKVIZ_MODEL_MEMORY`` (``4G``, ``512M``, ``2000000000``), a default set by whoever knows the models it will
serve (:func:`set_default_model_memory`: the server, twice the largest of its runs' models), and otherwise twice the
largest model loaded so far in the process. Before a load the model's size is estimated from its weight files (the
tensors' element counts in the safetensors headers, at the loaded precision) and the least recently used models are
dropped to make room; after it, its measured size (parameters and buffers) is what counts. A model larger than the
whole budget is refused in one line without being loaded, and a load that runs out of memory is refused in one line;
both are remembered, so the same model is not tried again in a loop (until the budget changes).

Models passed by the user (``model=``) are never held here: only what qkviz loaded itself. Each load and eviction is
logged (``qkviz serve`` shows them).
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path

from qkviz.core.errors import QkvizError

logger = logging.getLogger(__name__)

#: the environment variable of the budget
MEMORY_VARIABLE = "QKVIZ_MODEL_MEMORY"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory(text: str) -> int:
    """``"4G"`` -> bytes (K, M, G, T: powers of 1024; an optional trailing ``B``; a plain number is bytes); a value
    that is not one is refused in one line."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*", str(text), flags=re.IGNORECASE)
    if found is None or float(found.group(1)) <= 0:
        raise QkvizError(f"a model memory budget is a positive size such as 4G, 512M or 2000000000 (bytes), "
                         f"got {text!r}")
    return int(float(found.group(1)) * _UNITS[found.group(2).upper()])


def megabytes(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MB"


def model_bytes(model) -> int:
    """What a loaded model holds: its parameters and buffers, each once."""
    seen, total = set(), 0
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    return total


def estimated_bytes(directory: Path, bytes_per_value: int = 4) -> int:
    """A model's size once loaded, from its weight files: the element counts in the safetensors headers times
    ``bytes_per_value`` (qkviz loads float32), or the files' sizes where they are not safetensors; 0 where none."""
    directory = Path(directory)
    counts = 0
    for path in directory.glob("*.safetensors"):
        with path.open("rb") as handle:
            length = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(length))
        counts += sum(_numel(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
    if counts:
        return counts * bytes_per_value
    return sum(path.stat().st_size for pattern in ("*.bin", "*.pt") for path in directory.glob(pattern))


def _numel(shape: list[int]) -> int:
    total = 1
    for size in shape:
        total *= int(size)
    return total


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or (isinstance(error, RuntimeError) and (
        "out of memory" in str(error).lower() or "can't allocate memory" in str(error).lower()))


class ModelCache:
    """Loaded models by key, least recently used first out, under a budget in bytes (see the module)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._models: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._failures: dict[Hashable, tuple[int | None, str]] = {}
        self._loading: dict[Hashable, str] = {}
        self._budget: int | None = None
        self._default: int | None = None
        self._largest = 0

    # -- the budget -----------------------------------------------------------------------------------------------
    def set_budget(self, budget: int | None) -> None:
        """The budget in bytes (None: the environment's or the default); the models over it are dropped now."""
        with self._lock:
            self._budget = budget
            self._failures.clear()
            self._make_room(0)

    def set_default(self, budget: int | None) -> None:
        with self._lock:
            self._default = budget
            self._failures.clear()
            self._make_room(0)

    @property
    def budget(self) -> int | None:
        """The budget in force, in bytes (None before any model was loaded, with nothing set)."""
        return self._budget_with(0)

    def _budget_with(self, size: int) -> int | None:
        """The budget, counting a model of ``size`` bytes about to be loaded where it is twice the largest model."""
        if self._budget is not None:
            return self._budget
        if os.environ.get(MEMORY_VARIABLE):
            return parse_memory(os.environ[MEMORY_VARIABLE])
        if self._default is not None:
            return self._default
        largest = max(self._largest, size)
        return 2 * largest if largest else None

    @property
    def used(self) -> int:
        return sum(size for _model, size in self._models.values())

    # -- what is held ---------------------------------------------------------------------------------------------
    def get(self, key: Hashable):
        """The model held under ``key`` (now the most recently used), or None."""
        with self._lock:
            if key not in self._models:
                return None
            self._models.move_to_end(key)
            return self._models[key][0]

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._models)

    def drop(self, key: Hashable, why: str = "") -> None:
        with self._lock:
            if key in self._models:
                _model, size = self._models.pop(key)
                logger.info("model memory: dropped %s (%s)%s", _name(key), megabytes(size), f": {why}" if why else "")

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
            self._failures.clear()

    @property
    def loading(self) -> str | None:
        """What is being loaded now (a model's name), or None."""
        return next(iter(self._loading.values()), None)

    # -- loading --------------------------------------------------------------------------------------------------
    def load(self, key: Hashable, loader: Callable[[], object], what: str, estimate: int = 0):
        """The model under ``key``, loaded by ``loader()`` when not held (``what``: its name in the log and in a
        refusal; ``estimate``: its size in bytes before loading, 0 when unknown)."""
        with self._lock:
            held = self.get(key)
            if held is not None:
                return held
            failed = self._failures.get(key)
            if failed is not None and failed[0] == self.budget:
                raise QkvizError(failed[1])
            budget = self._budget_with(estimate)
            if budget is not None and estimate > budget:
                self._refuse(key, f"{what} needs about {megabytes(estimate)}, more than the model memory budget of "
                                  f"{megabytes(budget)}; raise it ({MEMORY_VARIABLE}, qkviz serve --model-memory)")
            self._make_room(estimate, budget)
            self._loading[key] = what
        try:
            model = loader()
        except BaseException as error:
            if _out_of_memory(error):
                with self._lock:
                    self._refuse(key, f"{what} did not fit in memory while loading ({type(error).__name__}); free "
                                      f"memory or lower the model memory budget ({MEMORY_VARIABLE})")
            raise
        finally:
            with self._lock:
                self._loading.pop(key, None)
        return self._keep(key, model, what)

    def _keep(self, key: Hashable, model, what: str):
        size = model_bytes(model)
        with self._lock:
            budget = self._budget_with(size)
            if budget is not None and size > budget:
                del model
                self._refuse(key, f"{what} needs {megabytes(size)}, more than the model memory budget of "
                                  f"{megabytes(budget)}; raise it ({MEMORY_VARIABLE}, qkviz serve --model-memory)")
            self._largest = max(self._largest, size)
            self._make_room(size, budget)
            self._models[key] = (model, size)
            logger.info("model memory: loaded %s (%s; %s of %s held)", what, megabytes(size), megabytes(self.used),
                        megabytes(budget) if budget is not None else "no budget yet")
            return model

    def _make_room(self, size: int, budget: int | None = None) -> None:
        budget = self.budget if budget is None else budget
        while budget is not None and self._models and self.used + size > budget:
            key = next(iter(self._models))
            self.drop(key, f"least recently used, to stay within {megabytes(budget)}")

    def _refuse(self, key: Hashable, message: str) -> None:
        self._failures[key] = (self.budget, message)
        logger.warning("model memory: %s", message)
        raise QkvizError(message)


def _name(key: Hashable) -> str:
    return " ".join(str(part) for part in key) if isinstance(key, tuple) else str(key)


#: the process's loaded models
MODELS = ModelCache()


def set_model_memory(budget: int | str | None) -> None:
    """The process's model memory budget (bytes, or a size such as ``"4G"``; None: the environment's or the
    default)."""
    MODELS.set_budget(parse_memory(budget) if isinstance(budget, str) else budget)


def set_default_model_memory(budget: int | None) -> None:
    """The budget used when none is set: the server's twice its largest model."""
    MODELS.set_default(budget)


def model_loading() -> str | None:
    """The model being loaded now, or None (the app says "loading the model")."""
    return MODELS.loading


def model_memory_budget() -> int | None:
    """The budget in force, in bytes (None: twice the largest model, none loaded yet)."""
    return MODELS.budget


def model_memory_state() -> dict:
    """What the process's model memory holds: ``held`` (each model's key, least recently used first), ``used`` and
    ``budget`` in bytes (``budget`` None: twice the largest model, none loaded yet)."""
    return {"held": MODELS.keys(), "used": MODELS.used, "budget": MODELS.budget}
