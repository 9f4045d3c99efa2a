"""Which prefixes to warm, within the budget, most valuable first, in steps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from rag.chat.change_rule import ContextBars
from rag.chat.prompt import PromptPrefix
from warmup.budget import WarmBudget

#: Characters per token, for estimating a prefix's size before vLLM counts it.
CHARS_PER_TOKEN = 3.5

T = TypeVar("T")


def split_steps(items: Sequence[T], steps: int) -> list[list[T]]:
    """Progressive warmup (the warmup design): ``items``, in order, in ``steps`` near-equal steps
    (fewer when there are fewer items); the warmer checks vLLM's KV usage after each."""
    size = -(-len(items) // max(1, steps)) if items else 0
    return [list(items[i : i + size]) for i in range(0, len(items), size)] if size else []


def estimate_tokens(prefix: PromptPrefix) -> int:
    chars = sum(len(m["content"]) + 16 for m in prefix.messages)
    return int(chars / CHARS_PER_TOKEN) + 8


def prefix_tokens(prefix: PromptPrefix) -> int:
    """A prefix's tokens: vLLM's count where the aligner took one, else an estimate."""
    return prefix.tokens if prefix.tokens is not None else estimate_tokens(prefix)


@dataclass(frozen=True)
class Candidate:
    """A prefix worth warming: the queries that want it and how often they are asked."""

    prefix: PromptPrefix
    keys: tuple[str, ...]
    bars: tuple[ContextBars, ...]  # per key: what its context sets for detection
    frequency: float
    est_tokens: int


@dataclass(frozen=True)
class Incumbent:
    """A warm entry already in the budget: a candidate worth more may displace it."""

    fingerprint: str
    heat: float
    tokens: int


@dataclass(frozen=True)
class Plan:
    steps: list[list[Candidate]]
    skipped_over_budget: int
    #: Candidates shorter than one KV block: nothing of them could be reused.
    skipped_no_full_block: int = 0
    #: Chosen candidates longer than the per-entry share: warmed only that far.
    truncated: int = 0
    # Per chosen candidate's fingerprint, the warm entries it displaces: retired only
    # when that candidate is warmed, so a cycle cut short never drops entries for
    # replacements it did not warm.
    displaces: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def displaced(self) -> tuple[str, ...]:
        return tuple(fp for victims in self.displaces.values() for fp in victims)

    @property
    def candidates(self) -> list[Candidate]:
        return [c for step in self.steps for c in step]


class WarmupPlanner:
    """Orders candidates by decayed frequency × tokens saved ÷ size and cuts at the budget.

    When the budget is full, a candidate displaces warm entries worth less than itself
    (coldest first), so the contexts users ask for are not locked out by predictions
    nobody asked for."""

    def __init__(self, steps: int = 3) -> None:
        self.steps = max(1, steps)

    @staticmethod
    def value(candidate: Candidate, budget: WarmBudget) -> float:
        """Decayed frequency × cached tokens a hit reuses, per token of budget."""
        size = budget.entry_tokens(candidate.est_tokens)
        return candidate.frequency * budget.full_blocks(size) / max(1, size)

    @staticmethod
    def incumbent_value(incumbent: Incumbent, budget: WarmBudget) -> float:
        return incumbent.heat * budget.full_blocks(incumbent.tokens) / max(1, incumbent.tokens)

    def plan(
        self,
        candidates: Sequence[Candidate],
        budget: WarmBudget,
        used_tokens: int,
        incumbents: Sequence[Incumbent] = (),
    ) -> Plan:
        """``used_tokens``: what the warm entries take now (``incumbents`` among them)."""
        ranked = sorted(
            candidates,
            key=lambda c: (-self.value(c, budget), c.prefix.fingerprint),
        )
        evictable = sorted(
            incumbents, key=lambda i: (self.incumbent_value(i, budget), i.fingerprint)
        )
        chosen: list[Candidate] = []
        displaces: dict[str, tuple[str, ...]] = {}
        over = short = truncated = 0
        room = budget.max_tokens - used_tokens
        for candidate in ranked:
            # A context over the per-entry share takes only the share (block-aligned).
            size = budget.entry_tokens(candidate.est_tokens)
            if budget.full_blocks(size) == 0:
                short += 1  # shorter than one KV block: nothing could be reused
                continue
            if size > room:
                worth = self.value(candidate, budget)
                victims, freed = [], 0
                for incumbent in evictable:
                    if room + freed >= size:
                        break
                    if self.incumbent_value(incumbent, budget) >= worth:
                        break
                    victims.append(incumbent)
                    freed += incumbent.tokens
                if room + freed < size:
                    over += 1
                    continue
                evictable = evictable[len(victims) :]
                displaces[candidate.prefix.fingerprint] = tuple(v.fingerprint for v in victims)
                room += freed
            chosen.append(candidate)
            truncated += size < candidate.est_tokens
            room -= size
        return Plan(
            steps=split_steps(chosen, self.steps),
            skipped_over_budget=over,
            skipped_no_full_block=short,
            truncated=truncated,
            displaces=displaces,
        )
