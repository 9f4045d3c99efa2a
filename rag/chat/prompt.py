"""The one prompt builder: chat and warmup both call it, so their prefixes match.

Segments run from most to least stable — fixed instruction, passages, knowledge-
graph triples, then the question in its own user turn — so that everything before
the question is a reusable prefix for vLLM's prefix cache. Passages and triples
are put in a canonical order: the same retrieved set gives the same prefix
whatever its score order (``PassageOrder.STABLE``, the default; ``RANK`` keeps
retrieval's order and turns this off).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from rag.knowledge.models import Passage
from rag.llm.alignment import BlockAligner
from rag.llm.client import Message

TripleText = tuple[str, str, str]

INSTRUCTION = (
    "You are a helpful assistant for a knowledge base. Answer the user's question using "
    "only the passages and facts below, and cite passages by number, like [1]. If they do "
    "not contain the answer, say that you do not know."
)


@dataclass(frozen=True)
class PromptPrefix:
    """Everything a chat sends before the question: the part worth keeping warm."""

    messages: tuple[Message, ...]
    passages: tuple[Passage, ...]
    triples: tuple[TripleText, ...]
    fingerprint: str
    #: Its length in the model's tokens where known (counted when it was block-aligned).
    tokens: int | None = None

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return tuple(p.chunk_id for p in self.passages)

    def numbered(self) -> list[tuple[str, str]]:
        """(doc id, text) of each passage as the prompt shows it: entry ``n - 1`` is
        the passage an answer cites as ``[n]``."""
        return _shown(self.passages)


@dataclass(frozen=True)
class Prompt:
    prefix: PromptPrefix
    messages: list[Message] = field(default_factory=list)


class PassageOrder(StrEnum):
    """How a prefix orders its passages (docs/warmup.md, "Passage order")."""

    #: By chunk id: one retrieved set is one prefix, whatever its score order, so two
    #: questions that retrieve the same passages share all of their context's KV.
    STABLE = "stable"
    #: Retrieval's order, best first: the same set in another order is another prefix.
    RANK = "rank"


def canonical_passages(passages: Sequence[Passage]) -> tuple[Passage, ...]:
    return tuple(sorted(passages, key=lambda p: p.chunk_id))


def ordered_passages(passages: Sequence[Passage], order: PassageOrder) -> tuple[Passage, ...]:
    if order is PassageOrder.RANK:
        return tuple(sorted(passages, key=lambda p: -p.score))  # stable among equal scores
    return canonical_passages(passages)


def canonical_triples(triples: Sequence[Sequence[str]]) -> tuple[TripleText, ...]:
    return tuple(sorted((s, p, o) for s, p, o in triples))


def _shown(passages: Sequence[Passage]) -> list[tuple[str, str]]:
    """(doc id, text) of each passage as the prompt shows it: its widened window where
    it has one; hits whose windows were merged into one are shown once."""
    shown: list[tuple[str, str]] = []
    for p in passages:
        item = (p.doc_id, (p.window or p.text).strip())
        if item not in shown:
            shown.append(item)
    return shown


def fingerprint_of(prefix_messages: Sequence[Message]) -> str:
    """The one fingerprint of a prompt prefix: the registry's key and the router's."""
    digest = hashlib.sha256(json.dumps(list(prefix_messages), ensure_ascii=False).encode())
    return digest.hexdigest()[:32]


#: Chat-model tokens per embedding word-piece (window budgets count word-pieces,
#: prompts count the chat model's tokens), with a margin: on Git's documentation (46
#: pages, 329 slices of 2,000 characters) SmolLM2 took 0.98 per MiniLM word-piece at
#: the median, 1.16 at most; text further from English prose takes more.
MODEL_TOKENS_PER_WORDPIECE = 1.5
#: Chat-model tokens around each passage ("[n] (source: id)") and per triple line.
PASSAGE_HEADER_TOKENS = 24
TRIPLE_TOKENS = 32
#: The instruction, the headings and the chat template's own tokens.
FIXED_TOKENS = 96


@dataclass(frozen=True)
class PromptShape:
    """What bounds the size of a prefix the builder renders: the chat path's settings.

    Warmup sizes its per-entry share from it, so that any context a chat can
    retrieve fits one entry (``warmup.budget.entry_share``)."""

    passages: int  # top_k
    passage_wordpieces: int  # a passage as shown: its window budget, or one chunk
    triples: int  # kg_max_triples

    def largest_prefix_tokens(self, block_size: int) -> int:
        """The most chat-model tokens a prefix of this shape takes, padded to whole
        ``block_size`` blocks as the aligner pads it."""
        passage = self.passage_wordpieces * MODEL_TOKENS_PER_WORDPIECE + PASSAGE_HEADER_TOKENS
        tokens = FIXED_TOKENS + self.passages * passage + self.triples * TRIPLE_TOKENS
        block = max(1, block_size)
        return -(-int(tokens) // block) * block


class PromptBuilder:
    """Renders passages, triples and a question into chat messages."""

    def __init__(
        self,
        instruction: str = INSTRUCTION,
        aligner: BlockAligner | None = None,
        order: PassageOrder = PassageOrder.STABLE,
    ) -> None:
        """``aligner``: pad each prefix to whole KV blocks (``rag.llm.alignment``).
        ``order``: the passages' order in a prefix."""
        self.instruction = instruction
        self.aligner = aligner
        self.order = order

    def prefix(
        self, passages: Sequence[Passage], triples: Sequence[Sequence[str]] = ()
    ) -> PromptPrefix:
        ordered = ordered_passages(passages, self.order)
        facts = canonical_triples(triples)
        parts = [self.instruction]
        if ordered:
            parts.append("Passages:")
            parts.extend(
                f"[{i}] (source: {doc_id})\n{text}"
                for i, (doc_id, text) in enumerate(_shown(ordered), 1)  # as numbered()
            )
        else:
            parts.append("Passages: none were found.")
        if facts:
            parts.append(
                "Domain constraints (facts from the knowledge graph; treat them as true):\n"
                + "\n".join(f"- ({s}; {p}; {o})" for s, p, o in facts)
            )
        system, tokens = "\n\n".join(parts), None
        if self.aligner is not None:
            system, tokens = self.aligner.align(system)
        messages = ({"role": "system", "content": system},)
        return PromptPrefix(
            messages=messages,
            passages=ordered,
            triples=facts,
            fingerprint=fingerprint_of(messages),
            tokens=tokens,
        )

    def build(
        self,
        question: str,
        passages: Sequence[Passage],
        triples: Sequence[Sequence[str]] = (),
        history: Sequence[Message] = (),
    ) -> Prompt:
        """Full messages: the prefix, any earlier turns, then the question."""
        return self.with_question(self.prefix(passages, triples), question, history)

    @staticmethod
    def with_question(
        prefix: PromptPrefix, question: str, history: Sequence[Message] = ()
    ) -> Prompt:
        """A rendered prefix followed by any earlier turns and the question."""
        messages = [*prefix.messages, *history, {"role": "user", "content": question.strip()}]
        return Prompt(prefix=prefix, messages=messages)
