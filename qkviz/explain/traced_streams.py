"""The traced streams of the sequences explained lately, kept so that a further pair in one of them needs no pass.

A pair's split runs the model over the pair's sequence up to the head's layer (about 80% of its cost) and reads what
every layer computed at the pair's two tokens. Here that pass is made once per sequence, keeping what it computed at
**every** position (:func:`qkviz.extraction.residual.traced_sequence.trace_sequence`); any further pair of the same
sequence, at any layer the trace reaches, is split from those records, with the same code and the same checks, without
a pass. The first pair of a sequence traces it up to the layer asked; a pair at a deeper layer later traces it again up
to the model's last layer, so a sequence is traced at most twice.

* **Key**: the run (its fingerprint), the sequence (its index and a sha256 of its token ids) and the model: the model
  object by a serial number held through a weak reference (never the model itself: a model the user or the model
  memory drops is freed, and its traces are dropped with it), its device and its parameters' type. Another run,
  another sequence or another model object never reads a trace it did not make.
* **Bound**: the traces are kept least recently used first out, under a budget in bytes of the tensors they hold (each
  storage once): :func:`set_trace_memory` (``"512M"``, bytes, or None), else the environment variable
  ``QKVIZ_TRACE_MEMORY``, else :data:`DEFAULT_BUDGET`. A trace that would not fit is not made: the pair is split from
  a pass at its own two tokens (as before this cache), and nothing is kept.
* **Logged** (``qkviz.explain.traced_streams``, INFO): each trace kept, each pair answered from one, each trace dropped
  and why.
* **Precision**: a trace holds what the pass computed, in the model's own precision, and a pair is split from it by the
  same float64 arithmetic as from a fresh pass: a cached answer is the uncached one.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.probes.model_cache import megabytes, parse_memory
from qkviz.probes.model_on_demand import sequence_ids
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: the environment variable of the budget
MEMORY_VARIABLE = "QKVIZ_TRACE_MEMORY"
#: the budget when none is set: room for a 1,000-token SmolLM2 sequence traced to its last layer, with room to spare
DEFAULT_BUDGET = 1 << 30
#: a trace's bytes per position and layer, in units of the stream's width times its element size, before it is made
#: (what decides whether it is made at all): SmolLM2's traces hold about 8 of them; a larger guess errs to no trace
ESTIMATED_WIDTHS = 10


@dataclass(frozen=True)
class TraceKey:
    """What a trace is the trace of: the model object's serial (:func:`model_serial`), its device and parameters'
    type, the run's fingerprint, the sequence's index and the sha256 of its token ids."""

    model: int
    device: str
    dtype: str
    run: str
    sentence: int
    tokens: str


class TracedStreams:
    """Traces by :class:`TraceKey`, least recently used first out, under a budget in bytes (see the module)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._traces: OrderedDict[TraceKey, tuple[object, str]] = OrderedDict()
        self._budget: int | None = None
        self.hits = 0
        self.misses = 0

    @property
    def budget(self) -> int:
        """The budget in force, in bytes."""
        if self._budget is not None:
            return self._budget
        if os.environ.get(MEMORY_VARIABLE):
            try:
                return parse_memory(os.environ[MEMORY_VARIABLE])
            except QkvizError:
                raise QkvizError(f"{MEMORY_VARIABLE} is a positive size such as 1G, 512M or 2000000000 (bytes), "
                                 f"got {os.environ[MEMORY_VARIABLE]!r}") from None
        return DEFAULT_BUDGET

    def set_budget(self, budget: int | None) -> None:
        """The budget in bytes (0: keep nothing; None: the environment's or the default); traces over it are
        dropped now."""
        with self._lock:
            self._budget = budget
            self._make_room(0)

    @property
    def used(self) -> int:
        return sum(trace.nbytes for trace, _what in self._traces.values())

    def get(self, key: TraceKey):
        """The trace held under ``key`` (now the most recently used), or None."""
        with self._lock:
            if key not in self._traces:
                return None
            self._traces.move_to_end(key)
            return self._traces[key][0]

    def lookup(self, key: TraceKey, layer: int):
        """``(trace, held)``: the trace under ``key`` where it reaches ``layer`` (a hit), else None (a miss); and
        the trace held under ``key`` whatever its depth, or None."""
        with self._lock:
            held = self.get(key)
            hit = held if held is not None and held.reaches(layer) else None
            if hit is not None:
                self.hits += 1
            else:
                self.misses += 1
            return hit, held

    def fits(self, size: int) -> bool:
        return size <= self.budget

    def keep(self, key: TraceKey, trace, what: str) -> None:
        """Keep ``trace`` under ``key`` (replacing a shallower one), dropping the least recently used to make room;
        one that does not fit the whole budget, or holds something of its model, is not kept."""
        with self._lock:
            self._drop(key, "traced deeper")
            if not trace.keepable:
                logger.info("traced streams: not keeping %s: its attention's inputs hold more than tensors", what)
                return
            if trace.nbytes > self.budget:
                logger.info("traced streams: not keeping %s (%s): more than the budget of %s (%s)", what,
                            megabytes(trace.nbytes), megabytes(self.budget), MEMORY_VARIABLE)
                return
            self._make_room(trace.nbytes)
            self._traces[key] = (trace, what)
            logger.info("traced streams: kept %s to layer %d (%s; %s of %s held)", what, trace.last_layer,
                        megabytes(trace.nbytes), megabytes(self.used), megabytes(self.budget))

    def forget_model(self, serial: int) -> None:
        """Drop every trace of the model whose serial is ``serial`` (it was freed: no trace of it can be read)."""
        with self._lock:
            for key in [key for key in self._traces if key.model == serial]:
                self._drop(key, "its model was freed")

    def clear(self) -> None:
        with self._lock:
            held = bool(self._traces)
            self._traces.clear()
            self.hits = self.misses = 0
            if held:
                _return_freed_memory()

    def state(self) -> dict:
        """What is held: ``held`` (what each trace is of, least recently used first), ``used`` and ``budget`` in
        bytes, and the ``hits`` and ``misses`` since the last :meth:`clear`."""
        with self._lock:
            return {"held": [what for _trace, what in self._traces.values()], "used": self.used,
                    "budget": self.budget, "hits": self.hits, "misses": self.misses}

    def _drop(self, key: TraceKey, why: str) -> None:
        if key in self._traces:
            trace, what = self._traces.pop(key)
            logger.info("traced streams: dropped %s (%s): %s", what, megabytes(trace.nbytes), why)
            del trace
            _return_freed_memory()

    def _make_room(self, size: int) -> None:
        budget = self.budget
        while self._traces and self.used + size > budget:
            self._drop(next(iter(self._traces)), f"least recently used, to stay within {megabytes(budget)}")


def _return_freed_memory() -> None:
    """The memory of a trace dropped, given back to the system (traces exist only where torch is loaded)."""
    from qkviz.extraction.residual.traced_sequence import return_freed_memory

    return_freed_memory()


#: the process's traces
TRACES = TracedStreams()
#: model object -> its serial, for as long as the object lives (a weak reference: the model is never held)
_SERIALS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_COUNTER = itertools.count()
_SERIALS_LOCK = threading.Lock()


def model_serial(model) -> int:
    """A number naming the model object for as long as it lives (never reused); its traces are dropped when it is
    freed."""
    with _SERIALS_LOCK:
        serial = _SERIALS.get(model)
        if serial is None:
            serial = _SERIALS[model] = next(_COUNTER)
            weakref.finalize(model, TRACES.forget_model, serial)
        return serial


def set_trace_memory(budget: int | str | None) -> None:
    """The budget of the process's traced streams: bytes, a size such as ``"512M"``, 0 to keep none, or None (the
    environment's ``QKVIZ_TRACE_MEMORY``, else :data:`DEFAULT_BUDGET`)."""
    if isinstance(budget, str):
        try:
            budget = parse_memory(budget)
        except QkvizError:
            raise QkvizError(f"a trace memory budget is a positive size such as 1G, 512M or 2000000000 (bytes), "
                             f"got {budget!r}") from None
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise QkvizError(f"a trace memory budget is a number of bytes (0 or more), got {budget!r}")
    TRACES.set_budget(budget)


def trace_memory_state() -> dict:
    """What the process's traced streams hold (:meth:`TracedStreams.state`)."""
    return TRACES.state()


def clear_traces() -> None:
    """Drop every traced stream (and reset the hit and miss counts)."""
    TRACES.clear()


def sequence_parts(run: StoredRun, model, sentence: int, positions: list[int], layer: int):
    """Every head's query and key at ``layer`` and at ``positions`` of the run's sequence ``sentence``, split by part
    (:class:`~qkviz.extraction.residual.residual_parts.QueryKeyParts`): from the sequence's kept trace when there is
    one reaching the layer, else from a trace made now and kept (see the module)."""
    from qkviz.extraction.residual.residual_parts import query_key_parts
    from qkviz.extraction.residual.traced_sequence import trace_sequence

    ids = sequence_ids(run, sentence)
    key = _key(run, model, sentence, ids)
    what = f"{run.path.name} sequence {sentence} ({len(ids):,} tokens)"
    hit, held = TRACES.lookup(key, layer)
    if hit is not None:
        logger.info("traced streams: layer %d of %s answered from its trace", layer, what)
        return hit.query_key_parts(model, positions, layer)
    depth = layer if held is None else run.n_layers - 1
    if not TRACES.fits(estimated_bytes(model, len(ids), depth)):
        last = max(positions) + 1 if run.is_causal else len(ids)
        return query_key_parts(model, ids[:last], positions, layer)
    trace = trace_sequence(model, ids, depth)
    TRACES.keep(key, trace, what)
    return trace.query_key_parts(model, positions, layer)


def estimated_bytes(model, length: int, depth: int) -> int:
    """What a trace of ``length`` positions up to layer ``depth`` is guessed to hold before it is made
    (:data:`ESTIMATED_WIDTHS` of the stream's width per position and layer)."""
    weight = model.get_input_embeddings().weight
    return length * (depth + 1) * int(weight.shape[-1]) * weight.element_size() * ESTIMATED_WIDTHS


def _key(run: StoredRun, model, sentence: int, ids: np.ndarray) -> TraceKey:
    parameter = next(model.parameters())
    return TraceKey(model_serial(model), str(parameter.device), str(parameter.dtype), str(run.manifest["fingerprint"]),
                    int(sentence), hashlib.sha256(np.ascontiguousarray(ids, dtype=np.int64).tobytes()).hexdigest())
