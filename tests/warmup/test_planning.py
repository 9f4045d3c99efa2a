"""Budget tiers, planning and detection on plain data (no vLLM)."""

from __future__ import annotations

import numpy as np

from rag.chat.change_rule import ContextBars
from rag.chat.prompt import PromptBuilder
from rag.knowledge.models import ChangeSet, ChunkRecord, Passage
from rag.llm.client import CacheConfig
from warmup.budget import GIB, WarmBudget, tier_share
from warmup.detector import ChangeDetector
from warmup.planner import Candidate, Incumbent, WarmupPlanner
from warmup.registry import EntryIndex, QueryMatrix


def test_seed_tiers() -> None:
    assert tier_share(2 * GIB) == 0.0
    assert tier_share(4 * GIB) == 0.3
    assert tier_share(16 * GIB) == 0.3
    assert tier_share(17 * GIB) == 0.5
    budget = WarmBudget.from_cache(CacheConfig(128, 1456, 4 * GIB), entry_max_tokens=1024)
    assert budget.capacity_tokens == 186_368 and budget.max_tokens == 55_910
    assert budget.per_entry_max_tokens == 1024
    assert budget.full_blocks(394) == 384
    assert not WarmBudget.from_cache(CacheConfig(128, 728, 2 * GIB), 1024).enabled


def candidate(i: int, frequency: float, tokens: int) -> Candidate:
    passage = Passage(doc_id=f"d{i}", chunk_id=f"c{i}", text=f"text {i}", score=0.5)
    prefix = PromptBuilder().prefix([passage])
    return Candidate(prefix, (f"q{i}",), (ContextBars(0.5),), frequency, tokens)


def test_planner_orders_by_value_and_cuts_at_the_budget() -> None:
    budget = WarmBudget(
        capacity_tokens=10_000, share=0.3, block_size=128, per_entry_max_tokens=1024
    )
    candidates = [
        candidate(0, 1.0, 600),
        candidate(1, 5.0, 600),
        candidate(2, 3.0, 600),
        candidate(3, 9.0, 2000),  # longer than one entry's share: warmed that far
        candidate(4, 9.0, 100),  # shorter than a block: nothing to reuse
        candidate(5, 2.0, 600),
        candidate(6, 4.0, 600),
    ]
    plan = WarmupPlanner(steps=3).plan(candidates, budget, used_tokens=900)
    chosen = [c.keys[0] for c in plan.candidates]
    # 2,100 tokens of room: q3 takes its share (1,024 of its 2,000), q1 600; the rest
    # do not fit, and q4 (no full block) could not be reused.
    assert chosen == ["q3", "q1"]
    assert plan.truncated == 1
    assert plan.skipped_over_budget == 4 and plan.skipped_no_full_block == 1
    assert [len(step) for step in plan.steps] == [1, 1]


def test_a_full_budget_gives_way_to_hotter_candidates_only() -> None:
    budget = WarmBudget(
        capacity_tokens=10_000, share=0.3, block_size=128, per_entry_max_tokens=1024
    )  # 3,000 tokens, all taken by five 600-token entries
    incumbents = [Incumbent(f"fp{i}", heat, 600) for i, heat in enumerate([0.5, 0.5, 2, 3, 4])]
    candidates = [candidate(10, 1.0, 600), candidate(11, 0.4, 600), candidate(12, 1.5, 1000)]
    plan = WarmupPlanner(steps=1).plan(candidates, budget, used_tokens=3000, incumbents=incumbents)
    # 12 (1.5) displaces both 0.5 entries; 10 (1.0) finds nothing colder left to displace.
    assert [c.keys[0] for c in plan.candidates] == ["q12"]
    assert plan.displaced == ("fp0", "fp1")
    assert plan.displaces == {plan.candidates[0].prefix.fingerprint: ("fp0", "fp1")}
    assert plan.skipped_over_budget == 2
    nothing = WarmupPlanner().plan(
        [candidate(11, 0.4, 600)], budget, used_tokens=3000, incumbents=incumbents
    )
    assert nothing.candidates == [] and nothing.displaced == ()


def test_detector_uses_removed_chunks_and_kth_scores() -> None:
    index = EntryIndex(
        chunk_ids={"A": ("a1", "a2"), "B": ("b1", "b2"), "C": ("c1", "c2")},
        doc_ids={"A": ("da",), "B": ("db",), "C": ("dc",)},
    )
    e = np.eye(3, dtype=np.float32)
    queries = QueryMatrix(
        keys=["qa", "qb", "qc"],
        fingerprints=["A", "B", "C"],
        embeddings=e,
        kth_scores=np.array([0.5, 0.9, 0.5], np.float32),
        fact_bars=np.full(3, np.nan, np.float32),
    )
    change = ChangeSet(
        updated=["da"],
        removed_chunk_ids=["a1"],
        added_chunks=[ChunkRecord(doc_id="dn", chunk_id="n", embedding=[0.0, 0.8, 0.6])],
        kb_version=2,
    )
    result = ChangeDetector().detect(index, queries, [change])
    # A: its chunk was replaced; B: 0.8 < its 3rd passage (0.9); C: 0.6 > 0.5 enters
    assert result.affected == {"A", "C"} and result.unaffected == {"B"}
    assert result.by_removed_chunks == 1 and result.by_new_chunks == 1
