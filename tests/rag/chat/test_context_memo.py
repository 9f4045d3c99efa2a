"""The context memo: a repeated question's retrieval is kept until a change can have
moved it, and a change forgets exactly the items it can have moved."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag.chat.change_rule import ChangeRule
from rag.chat.memo import ContextMemo, Retrieved
from rag.chat.prompt import PromptBuilder
from rag.chat.retriever import Retrieval
from rag.knowledge.models import ChangeSet, ChunkRecord, Passage


@dataclass(frozen=True)
class ScoredFact:
    subject: str
    predicate: str
    object: str
    score: float
    doc_id: str


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def retrieved(
    query: np.ndarray,
    chunks: Sequence[tuple[str, str, float]] = (("d1", "c1", 0.9), ("d2", "c2", 0.5)),
    facts: Sequence[ScoredFact] = (),
    reach: frozenset[str] = frozenset(),
) -> Retrieved:
    passages = [Passage(doc_id=d, chunk_id=c, text=c, score=s) for d, c, s in chunks]
    retrieval = Retrieval("q", query, passages, facts, fact_reach=reach)
    return Retrieved(retrieval, PromptBuilder().prefix(passages, retrieval.triples))


def change(**fields: object) -> ChangeSet:
    return ChangeSet(kb_version=2, **fields)


def remembered(memo: ContextMemo, key: str, item: Retrieved) -> ContextMemo:
    memo.put(key, memo.generation, item)
    return memo


def test_a_change_forgets_items_using_a_replaced_or_deleted_document() -> None:
    q = unit(1, 0, 0)
    memo = remembered(ContextMemo(), "a", retrieved(q))
    remembered(memo, "b", retrieved(q, [("d3", "c3", 0.9)]))
    assert memo.forget([change(updated=["d2"], removed_chunk_ids=["c2"])]) == 1
    assert memo.get("a") is None and memo.get("b") is not None
    assert memo.forget([change(deleted=["d3"])]) == 1 and len(memo) == 0


def test_a_new_chunk_is_forgotten_only_where_it_would_enter_the_top_k() -> None:
    near, far = unit(1, 0, 0), unit(0, 1, 0)
    memo = remembered(ContextMemo(), "near", retrieved(near))
    remembered(memo, "far", retrieved(far))
    # A new document's chunk close to "near" (score ~0.99 > its k-th, 0.5), far from "far".
    added = ChunkRecord(doc_id="d9", chunk_id="c9", embedding=unit(1, 0.1, 0).tolist())
    assert memo.forget([change(added=["d9"], added_chunks=[added])]) == 1
    assert memo.get("near") is None and memo.get("far") is not None


def test_facts_from_a_changed_document_or_a_stronger_new_fact_forget_the_item() -> None:
    q = unit(1, 0, 0)
    full = [ScoredFact("a", "b", "c", 0.8, "d5"), ScoredFact("e", "f", "g", 0.7, "d6")]
    new_fact = {
        "d7": unit(1, 0.2, 0)[None, :],
        "d8": unit(0, 0, 1)[None, :],
        "d6": unit(0, 0, 1)[None, :],
    }
    memo = ContextMemo(
        rule=ChangeRule(
            fact_vectors=lambda docs: np.concatenate([new_fact[d] for d in docs]), max_facts=2
        )
    )
    remembered(memo, "k", retrieved(q, facts=full))
    assert memo.forget([change(added=["d8"])]) == 0  # its fact scores 0 for this question
    assert memo.forget([change(added=["d7"])]) == 1  # ~0.98 beats the weakest fact, 0.7
    remembered(memo, "k", retrieved(q, facts=full))
    assert memo.forget([change(updated=["d6"])]) == 1  # an injected fact's source changed


def test_with_path_aware_facts_the_gain_and_the_entities_looked_at_count() -> None:
    """A path-aware selector can give a fact up to ``fact_gain`` over its cosine, and
    choose a fact that continues a path whatever its cosine: so a new fact 0.1 under the
    weakest, or one touching an entity its facts join, can enter."""
    q = unit(1, 0, 0)
    full = [ScoredFact("a", "b", "c", 0.8, "d5"), ScoredFact("e", "f", "g", 0.7, "d6")]
    vectors = {"near": unit(0.6, 0.8, 0)[None, :], "far": unit(0, 0, 1)[None, :]}
    entities = {"near": {"x"}, "far": {"brightfield"}}
    plain = ContextMemo(
        rule=ChangeRule(
            fact_vectors=lambda docs: np.concatenate([vectors[d] for d in docs]), max_facts=2
        )
    )
    paths = ContextMemo(
        rule=ChangeRule(
            fact_vectors=lambda docs: np.concatenate([vectors[d] for d in docs]),
            max_facts=2,
            fact_gain=0.2,
            fact_entities=lambda docs: set().union(*(entities[d] for d in docs)),
        )
    )
    for memo in (plain, paths):
        remembered(memo, "k", retrieved(q, facts=full, reach=frozenset({"brightfield", "a"})))
    # "near" scores 0.6 against the weakest 0.7: only a selector that adds 0.2 can take it
    assert plain.forget([change(added=["near"])]) == 0
    assert paths.forget([change(added=["near"])]) == 1
    # "far" scores 0, but touches an entity the item's facts join: a path can lift it
    assert plain.forget([change(added=["far"])]) == 0
    remembered(paths, "k", retrieved(q, facts=full, reach=frozenset({"brightfield", "a"})))
    assert paths.forget([change(added=["far"])]) == 1
    remembered(paths, "k", retrieved(q, facts=full, reach=frozenset({"a"})))
    assert paths.forget([change(added=["far"])]) == 0


def test_an_unchanged_write_forgets_nothing() -> None:
    memo = remembered(ContextMemo(), "a", retrieved(unit(1, 0, 0)))
    assert memo.forget([change(unchanged=["d1"])]) == 0 and memo.get("a") is not None


def test_a_retrieval_that_overlapped_a_change_is_not_kept() -> None:
    memo = ContextMemo()
    started = memo.generation  # read before retrieving
    memo.forget([change(added=["d9"])])  # a write lands while the retrieval runs
    memo.put("q", started, retrieved(unit(1, 0, 0)))
    assert memo.get("q") is None


def test_at_most_max_entries_least_recently_used_out() -> None:
    memo = ContextMemo(max_entries=2)
    for key in ("a", "b"):
        remembered(memo, key, retrieved(unit(1, 0, 0)))
    assert memo.get("a") is not None  # a is now the most recently used
    remembered(memo, "c", retrieved(unit(1, 0, 0)))
    assert len(memo) == 2 and memo.get("b") is None
    assert memo.get("a") is not None and memo.get("c") is not None
