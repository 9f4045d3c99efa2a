"""The passage-order replay: shared leading passages under an order, the tier's cost."""

from __future__ import annotations

from collections import Counter

from bench.passage_order import Replay, ordered, tier_of


def test_by_id_only_a_shared_first_passage_counts() -> None:
    replay = Replay(None)
    replay.add(frozenset({"b", "c", "d"}))
    assert replay.shared(frozenset({"b", "c", "x"})) == ("b", "c")
    assert replay.shared(frozenset({"a", "c", "d"})) == ()  # "a" sorts first: nothing shared


def test_a_tier_puts_popular_passages_first_and_counts_the_rewarms() -> None:
    replay = Replay(1)
    for context in ({"a", "p"}, {"b", "p"}, {"c", "x"}):
        replay.add(frozenset(context))
    counts = Counter(c for ctx in replay.seen for c in ctx)
    assert tier_of(counts, 1) == {"p"} and tier_of(Counter("abc"), 5) == frozenset()
    assert replay.shared(frozenset({"d", "p"})) == ()  # by id, "d" leads
    replay.new_cycle(counts)
    assert replay.tier_changes == 1 and replay.rewarms == 2  # {a,p} and {b,p} reorder
    assert ordered({"d", "p"}, replay.tier) == ("p", "d")
    assert replay.shared(frozenset({"d", "p"})) == ("p",)
    replay.new_cycle(counts)  # the same tier: nothing moves
    assert replay.tier_changes == 1 and replay.rewarms == 2
