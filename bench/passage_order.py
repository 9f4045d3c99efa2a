"""Passage order: how much of a first-sight context could come from cache under each
order of its passages, before any order is built into the prompt.

Contexts share KV blocks only up to their first differing token, so two contexts
share what they retrieved only where that comes first in both. Today passages are
ordered by chunk id (``rag.chat.prompt.canonical_passages``: byte-stable whatever
order retrieval returned). The design on trial orders a *popularity tier* first: the
passages that appeared most in the contexts seen so far, recomputed at each warm
cycle; the rest follow by id.

The measure replays the real section's request streams (steady, then after restart)
through the service's own retriever (Git's documentation ingested in-process, small-
to-big windows on; no vLLM) and, for each request whose question was never asked
before, the longest leading run of passages it shares with any earlier context under
each order (the instruction is shared by every context and counted in both the shared
and the whole length). That is an upper bound of what vLLM could serve from cache: it
assumes every earlier context is still resident, and, for the tier, re-warmed in the
new order whenever the tier moves (the count of those re-warms is the order's cost).
Shares are given in tokens (the embedding model's word-pieces, about one chat-model
token each on this corpus) and floored to whole KV blocks of 16 (GPU) and 128 (CPU).
``set_overlap`` is the ceiling no single order can pass: every passage the context
has in common with its best earlier context, as if each pair had its own order.

    python -m bench.passage_order [--quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path

from bench.harness import ingested
from bench.machine import Machine, this_machine
from bench.real_corpus import RealWorkload
from bench.real_records import RealSpec
from bench.record import Record
from rag.chat.prompt import INSTRUCTION
from rag.chat.query import normalize_query
from rag.chat.retriever import Retriever
from rag.chat.windows import PassageWindows
from rag.knowledge.embedding import shared_embedder
from rag.knowledge.models import DocumentIn

#: A warm cycle's worth of requests between two recomputations of the tier.
CYCLE = 20
#: Tier sizes tried: passages ordered first when they appeared in at least two contexts.
TIERS = (8, 32)
#: The chat template's and each passage header's tokens ("[n] (source: id)").
TEMPLATE_TOKENS, HEADER_TOKENS = 24, 12
BLOCKS = (16, 128)

Context = tuple[str, ...]  # chunk ids, in the order the prompt would show them


class OrderResult(Record):
    first_sights: int
    #: Mean share of a first sight's context tokens shared with an earlier context.
    shared_share: float
    shared_share_blocks: dict[str, float]
    #: First sights sharing at least one passage (beyond the instruction).
    sharing_a_passage: int
    #: Earlier contexts whose order changed when the tier moved: re-warms it would cost.
    rewarms: int = 0
    tier_changes: int = 0


class PassageOrderResult(Record):
    machine: Machine
    requests: int
    orders: dict[str, OrderResult]


def tier_of(counts: Counter[str], size: int) -> frozenset[str]:
    popular = [c for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n >= 2]
    return frozenset(popular[:size])


def ordered(context: Collection[str], tier: frozenset[str]) -> Context:
    return tuple(sorted(context, key=lambda c: (c not in tier, c)))


class Replay:
    """One order's view of the stream: the leading runs of every earlier context."""

    def __init__(self, tier_size: int | None) -> None:
        self.tier_size = tier_size
        self.tier: frozenset[str] = frozenset()
        self.seen: list[frozenset[str]] = []
        self.leads: set[Context] = set()
        self.rewarms = self.tier_changes = 0

    def shared(self, context: frozenset[str]) -> Context:
        mine = ordered(context, self.tier)
        k = max((k for k in range(1, len(mine) + 1) if mine[:k] in self.leads), default=0)
        return mine[:k]

    def add(self, context: frozenset[str]) -> None:
        self.seen.append(context)
        mine = ordered(context, self.tier)
        self.leads.update(mine[:k] for k in range(1, len(mine) + 1))

    def new_cycle(self, counts: Counter[str]) -> None:
        if self.tier_size is None:
            return
        tier = tier_of(counts, self.tier_size)
        if tier == self.tier:
            return
        old, self.tier = self.tier, tier
        self.tier_changes += 1
        self.rewarms += sum(1 for c in set(self.seen) if ordered(c, old) != ordered(c, tier))
        self.leads = set()
        for context in self.seen:
            mine = ordered(context, tier)
            self.leads.update(mine[:k] for k in range(1, len(mine) + 1))


def run(quick: bool, log: Callable[[str], None] = print) -> PassageOrderResult:
    workload = RealWorkload(RealSpec.quick() if quick else RealSpec.full())
    documents = [DocumentIn.model_validate(d, strict=False) for d in workload.documents()]
    embedder = shared_embedder()
    with ingested(documents, 50, embedder) as done:
        log(f"passage order: {len(documents)} sections ingested in {done.seconds:.0f} s")
        windows = PassageWindows(
            done.kb, embedder.count_tokens, done.settings.passage_window_tokens
        )
        retriever = Retriever(done.kb, None, 0, windows)
        stream = workload.steady + workload.restart
        contexts, tokens = [], {}
        for question in stream:
            passages = retriever.retrieve(question, top_k=done.settings.top_k).passages
            for p in passages:
                tokens[p.chunk_id] = embedder.count_tokens(p.window or p.text) + HEADER_TOKENS
            contexts.append(frozenset(p.chunk_id for p in passages))
    fixed = embedder.count_tokens(INSTRUCTION) + TEMPLATE_TOKENS
    replays = {"chunk_id": Replay(None)} | {f"tier_{n}": Replay(n) for n in TIERS}
    shares: dict[str, list[tuple[int, int]]] = {name: [] for name in [*replays, "set_overlap"]}
    counts: Counter[str] = Counter()
    asked: set[str] = set()
    for i, (question, context) in enumerate(zip(stream, contexts, strict=True)):
        if i and i % CYCLE == 0:
            for replay in replays.values():
                replay.new_cycle(counts)
        key = normalize_query(question)
        whole = fixed + sum(tokens[c] for c in context)
        if key not in asked:
            for name, replay in replays.items():
                lead = replay.shared(context)
                shares[name].append((fixed + sum(tokens[c] for c in lead), whole))
            best = max((context & s for s in set(replays["chunk_id"].seen)), key=len, default=())
            shares["set_overlap"].append((fixed + sum(tokens[c] for c in best), whole))
        asked.add(key)
        counts.update(context)
        for replay in replays.values():
            replay.add(context)
    orders = {}
    for name, pairs in shares.items():
        found = replays.get(name)
        orders[name] = OrderResult(
            first_sights=len(pairs),
            shared_share=round(statistics.fmean(s / w for s, w in pairs), 3),
            shared_share_blocks={
                str(b): round(statistics.fmean((s // b * b) / w for s, w in pairs), 3)
                for b in BLOCKS
            },
            sharing_a_passage=sum(1 for s, _ in pairs if s > fixed),
            rewarms=found.rewarms if found else 0,
            tier_changes=found.tier_changes if found else 0,
        )
        log(f"  {name}: {orders[name].to_json()}")
    return PassageOrderResult(machine=this_machine(False), requests=len(stream), orders=orders)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="80 sections, 110 requests")
    parser.add_argument("--out", type=Path, default=None, help="write the result here")
    args = parser.parse_args(argv)
    try:
        result = run(args.quick)
    except Exception as exc:  # a failed benchmark exits non-zero
        print(f"passage order failed: {exc!r}", file=sys.stderr)
        raise SystemExit(1) from exc
    print(json.dumps(result.to_json(), indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result.to_json(), indent=1))


if __name__ == "__main__":
    main()
