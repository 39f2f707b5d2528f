"""BatchMemo: values kept per object (by id, the object held) and key, least recently used dropped past the limit."""

import numpy as np

from qkviz.analysis.statistics.batch_memo import BatchMemo


def test_a_value_is_made_once_per_object_and_key_and_the_object_is_held():
    memo, made = BatchMemo(limit=10), []
    owner = object()

    def make(value):
        made.append(value)
        return value

    assert memo.get(owner, "a", lambda: make(1)) == 1
    assert memo.get(owner, "a", lambda: make(2)) == 1          # kept
    assert memo.get(owner, "b", lambda: make(3)) == 3          # another key
    assert memo.get(object(), "a", lambda: make(4)) == 4       # another object
    assert made == [1, 3, 4]
    held_id = id(owner)
    del owner
    assert any(id(kept) == held_id for kept, _, _ in memo._held.values())   # held: its id is not reused


def test_the_least_recently_used_go_first_past_the_limit_by_weight():
    memo = BatchMemo(limit=10, weight=lambda array: array.size)
    owners = [object() for _ in range(4)]
    for owner in owners[:2]:
        memo.get(owner, 0, lambda: np.zeros(4))
    memo.get(owners[0], 0, lambda: np.ones(4))                # used again: owners[1] is now the oldest
    memo.get(owners[2], 0, lambda: np.zeros(4))               # 12 cells > 10: owners[1]'s goes
    assert memo.get(owners[1], 0, lambda: np.full(4, 7.0))[0] == 7.0
    assert memo.get(owners[3], 0, lambda: np.zeros(11)).size == 11   # heavier than the limit: made, not kept
    assert sum(weight for _, _, weight in memo._held.values()) <= 10
    assert all(value.size != 11 for _, value, _ in memo._held.values())
