"""Per-slot prompt caches (executors/slot_cache.py): a joining prompt takes the free slot sharing
its longest prefix (a weak match counts as none), else an empty slot, else the least recently left;
a taken slot forgets."""

from __future__ import annotations

from vkdecode.executors.slot_cache import SlotCache, shared_prefix


def test_shared_prefix_leaves_one_prompt_token_to_run():
    assert shared_prefix([1, 2, 3], [1, 2, 3]) == 2
    assert shared_prefix([1, 2, 3], [1, 2, 9, 4]) == 2
    assert shared_prefix([1, 2], [1, 2, 3, 4]) == 2
    assert shared_prefix([], [1, 2]) == 0 and shared_prefix([5], [1, 2]) == 0


def test_the_longest_prefix_wins_then_an_empty_slot_then_the_least_recently_left():
    c = SlotCache(4)
    c.remember(0, [1, 2, 3, 4])
    c.remember(2, [1, 2, 7])
    assert c.pick([0, 1, 2, 3], [1, 2, 3, 4, 5]) == (0, 4)
    assert c.pick([0, 1, 2, 3], [1, 2, 7, 8]) == (2, 3)
    assert c.pick([1, 2, 3], [1, 2, 3, 4, 5]) == (2, 2)  # slot 0 is taken
    assert c.pick([0, 1, 2, 3], [9, 9]) == (1, 0)  # unrelated: an empty slot, no cache evicted
    assert c.pick([0, 2], [9, 9]) == (0, 0)  # none empty: the least recently left
    assert c.pick([0, 1, 2, 3], [1, 2, 3, 4, 5], reuse=False) == (1, 0)
    c.remember(3, [1, 2, 3, 4, 5, 6])
    assert c.pick([0, 3], [1, 2, 3, 4, 5, 6, 7]) == (3, 6)


def test_a_weak_match_does_not_evict_a_slot_but_is_reused_by_the_one_chosen():
    """Prompts sharing only a template's opening (under half a slot's tokens) pick as with no match."""
    c = SlotCache(3)
    c.remember(0, [1, 2, 3, 4, 5])
    c.remember(1, [1, 2, 6, 7, 8])
    assert c.pick([0, 1, 2], [1, 2, 9, 9]) == (2, 0)  # the empty slot; no cache evicted
    assert c.pick([0, 1], [1, 2, 9, 9]) == (0, 2)  # none empty: the least recently left, reused


def test_a_taken_slot_forgets_and_an_empty_leave_caches_nothing():
    c = SlotCache(2)
    c.remember(0, [1, 2, 3])
    c.forget(0)
    assert c.pick([0, 1], [1, 2, 3, 4]) == (1, 0) and c.ids == {}  # 1 never left: least recent
    c.remember(1, [])  # a sequence whose rows are not known: its slot holds nothing
    assert c.ids == {} and c.pick([0, 1], [5, 6]) == (0, 0)
