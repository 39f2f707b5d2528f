"""What every head of a run computes alike from its sentence batches, kept for the next heads.

A mask, the blocks a mask leaves to compute, the count of sentences allowing each pair of positions: each depends on
the batch (or the list of batches) and the mask's rule only, not on the head, so the per-head analyses compute it
once. A :class:`BatchMemo` keys a value by the ``id`` of the object it was made from and keeps that object with it,
so that the id cannot be taken by another object while the value is kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable


class BatchMemo:
    """Values made from an object (a sentence batch, a list of them) and a key, least recently used dropped first
    once their ``weight`` (1 a value unless told) passes ``limit``; a value heavier than ``limit`` is not kept."""

    def __init__(self, limit: int, weight: Callable[[object], int] = lambda _value: 1):
        self.limit = limit
        self._weight = weight
        self._held: OrderedDict[tuple, tuple[object, object, int]] = OrderedDict()
        self._total = 0

    def get(self, owner: object, key: Hashable, make: Callable[[], object]):
        """The value for ``owner`` and ``key``: the kept one, or ``make()``, kept."""
        name = (id(owner), key)
        if name in self._held:
            self._held.move_to_end(name)
            return self._held[name][1]
        value = make()
        weight = self._weight(value)
        if weight <= self.limit:
            self._held[name] = (owner, value, weight)     # the owner held with its value: its id stays its own
            self._total += weight
            while self._total > self.limit:
                _, (_, _, dropped) = self._held.popitem(last=False)
                self._total -= dropped
        return value

    def clear(self) -> None:
        self._held.clear()
        self._total = 0
