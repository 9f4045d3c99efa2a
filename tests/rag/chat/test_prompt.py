"""The prompt builder decides what vLLM can reuse: its layout is tested exactly."""

from rag.chat.prompt import INSTRUCTION, PassageOrder, PromptBuilder
from rag.knowledge.models import Passage


def passage(chunk_id: str, text: str, score: float = 0.5) -> Passage:
    return Passage(doc_id=f"doc-{chunk_id}", chunk_id=chunk_id, text=text, score=score)


P = [
    passage("c", "Gamma text.", 0.9),
    passage("a", "Alpha text.", 0.8),
    passage("b", "Beta text.", 0.1),
]


def test_prefix_is_independent_of_score_order() -> None:
    builder = PromptBuilder()
    one = builder.prefix(P)
    other = builder.prefix(list(reversed(P)))
    assert one.messages == other.messages
    assert one.fingerprint == other.fingerprint
    assert one.chunk_ids == ("a", "b", "c")


def test_question_comes_after_the_prefix_in_its_own_turn() -> None:
    prompt = PromptBuilder().build("  What is alpha?  ", P, [("b", "rel", "c")])
    prefix = list(prompt.prefix.messages)
    assert prompt.messages[: len(prefix)] == prefix
    assert prompt.messages[-1] == {"role": "user", "content": "What is alpha?"}
    system = prompt.messages[0]["content"]
    assert system.startswith(INSTRUCTION)
    # passages in canonical order, then the knowledge-graph block
    assert system.index("Alpha text.") < system.index("Beta text.") < system.index("Gamma text.")
    assert system.index("Gamma text.") < system.index("(b; rel; c)")


def test_different_questions_share_the_prefix_and_different_contexts_do_not() -> None:
    builder = PromptBuilder()
    q1 = builder.build("first question?", P)
    q2 = builder.build("another one?", P)
    assert q1.prefix == q2.prefix
    changed = builder.build("first question?", [*P[:2], passage("b", "Beta text, edited.")])
    assert changed.prefix.fingerprint != q1.prefix.fingerprint


def test_triples_are_canonical() -> None:
    builder = PromptBuilder()
    t = [("z", "p", "o"), ("a", "p", "o")]
    assert builder.prefix(P, t).fingerprint == builder.prefix(P, list(reversed(t))).fingerprint
    assert builder.prefix(P, t).triples == (("a", "p", "o"), ("z", "p", "o"))


def test_history_sits_between_prefix_and_question() -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    prompt = PromptBuilder().build("and now?", P, history=history)
    assert prompt.messages[1:3] == history
    assert prompt.messages[-1]["content"] == "and now?"


def test_rank_order_keeps_retrievals_order_and_so_splits_one_set_into_two_prefixes() -> None:
    builder = PromptBuilder(order=PassageOrder.RANK)
    best_first = builder.prefix(P)
    assert best_first.chunk_ids == ("c", "a", "b")  # by score, best first
    system = best_first.messages[0]["content"]
    assert system.index("[1] (source: doc-c)") < system.index("[2] (source: doc-a)")
    reranked = [passage("c", "Gamma text.", 0.05), passage("a", "Alpha text.", 0.8), P[2]]
    assert builder.prefix(reranked).chunk_ids == ("a", "b", "c")
    assert builder.prefix(reranked).fingerprint != best_first.fingerprint
    # the stable order gives both the one prefix
    stable = PromptBuilder()
    assert stable.prefix(reranked).fingerprint == stable.prefix(P).fingerprint
