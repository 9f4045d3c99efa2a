"""A fake vLLM engine behind ``rag.llm.client.LLMEngine``, for logic a real server cannot
reach quickly or at all: evictions on demand, crashes, hangs and malformed output.

It models what warmup depends on: prompts are token sequences (one token per
whitespace-separated word, plus one per role marker), KV blocks of ``block_size``
tokens are cached under the hash of everything before them (as vLLM's automatic
prefix caching does), only full blocks are reused, and the least recently used
block is evicted when the cache is full. A prefill's tokens are an exact prefix
of a chat's tokens for the same messages followed by a question.

With an ``events`` subscriber it also publishes KV-cache events as vLLM does: a
numbered batch per request (blocks stored, blocks evicted) and ``AllBlocksCleared``
on ``evict_all``; ``lose_events`` drops batches on the way (a sequence gap).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rag.chat.prompt import Message
from rag.llm.client import (
    CacheConfig,
    LLMBadResponseError,
    LLMUnavailableError,
    TextDelta,
    Usage,
)
from rag.llm.kv_events import BlockEvents, KVEventSubscriber


def tokens_of(messages: Sequence[Message], *, generation_prompt: bool) -> list[str]:
    tokens: list[str] = []
    for message in messages:
        tokens.append(f"<{message['role']}>")
        tokens.extend(message["content"].split())
    if generation_prompt:
        tokens.append("<assistant>")
    return tokens


def chain_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """The fake's block names: each full block hashed with everything before it."""
    hashes, parent = [], 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start : start + block_size])))
        hashes.append(parent)
    return hashes


@dataclass
class FakeHasher:
    """``BlockHasher`` for ``FakeEngine``'s token ids."""

    block_size: int

    def hashes(self, token_ids: Sequence[int]) -> list[int]:
        return chain_hashes(token_ids, self.block_size)


#: A fake event batch: ("stored" | "removed", hashes) pairs, or ("cleared", []).
FakeBatch = list[tuple[str, list[int]]]


def apply_fake_batch(batch: Any, sink: BlockEvents) -> int:
    """``KVEventSubscriber``'s ``apply`` for ``FakeBatch`` payloads."""
    for kind, hashes in batch:
        if kind == "stored":
            sink.stored(hashes)
        elif kind == "removed":
            sink.removed(hashes)
        else:
            sink.cleared()
    return len(batch)


@dataclass
class FakeEngine:
    """An in-process stand-in for vLLM; every fault is switched on by the test."""

    block_size: int = 4
    num_blocks: int = 256
    #: What the cache "lives in": 4 GiB is the tier where warmup may use 30% of it;
    #: ``None`` is what GPU vLLM reports (nothing).
    memory_bytes: int | None = 4 * 1024**3
    answer: str = "The answer is in the passages [1]."
    #: Raise ``LLMUnavailableError`` on every call (the server is down).
    down: bool = False
    #: Block every chat until ``release`` is set (the server hangs).
    hang: bool = False
    #: Stop a stream after this many deltas without finishing it (a crash mid-answer).
    crash_after_deltas: int | None = None
    #: Send this malformed payload instead of the first delta.
    malformed: str | None = None
    prefills: list[list[str]] = field(default_factory=list)
    touches: list[list[str]] = field(default_factory=list)  # prefills sent as re-touches
    chats: list[list[str]] = field(default_factory=list)
    #: The frequency penalty each chat was sent with.
    penalties: list[float] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    _blocks: OrderedDict[int, None] = field(default_factory=OrderedDict)
    #: Without prefix caching nothing is ever reused (the upstream image's default).
    prefix_caching: bool = True
    #: Without --enable-prompt-tokens-details usage carries no cached-token count.
    reports_cached_tokens: bool = True
    #: Seconds each prefill takes (a long warmup cycle, to see what overtakes it).
    prefill_delay_s: float = 0.0
    #: What ``kv_usage`` reports instead of the cached blocks' share (a loaded server).
    kv_usage_override: float | None = None
    #: Where this engine publishes KV-cache events (None: it publishes none).
    events: KVEventSubscriber | None = None
    #: Batches to drop before they reach the subscriber (events lost on the way).
    lose_events: int = 0
    _seq: int = 0
    _vocab: dict[str, int] = field(default_factory=dict)

    # ----- the cache model ----------------------------------------------------------

    def _ids(self, tokens: list[str]) -> list[int]:
        return [self._vocab.setdefault(t, len(self._vocab)) for t in tokens]

    def _block_hashes(self, tokens: list[str]) -> list[int]:
        return chain_hashes(self._ids(tokens), self.block_size)

    def _publish(self, batch: FakeBatch) -> None:
        """One numbered batch to the subscriber, or lost on the way."""
        seq, self._seq = self._seq, self._seq + 1
        if self.events is None or not batch:
            return
        if self.lose_events > 0:
            self.lose_events -= 1
            return
        self.events.receive(seq, batch)  # type: ignore[arg-type]

    def _run(self, tokens: list[str]) -> Usage:
        """Serve ``tokens``: reuse the cached leading blocks, cache the rest (LRU)."""
        hashes = self._block_hashes(tokens)
        cached = 0
        for h in hashes:
            if h not in self._blocks or not self.prefix_caching:
                break
            cached += 1
        stored = [h for h in hashes if h not in self._blocks]
        for h in hashes:
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        removed = []
        while len(self._blocks) > self.num_blocks:
            removed.append(self._blocks.popitem(last=False)[0])
        batch: FakeBatch = []
        if removed:
            batch.append(("removed", removed))
        if stored:
            batch.append(("stored", [h for h in stored if h in self._blocks]))
        self._publish(batch)
        if not self.reports_cached_tokens:
            return Usage(prompt_tokens=len(tokens), cached_reported=False)
        return Usage(prompt_tokens=len(tokens), cached_tokens=cached * self.block_size)

    def evict_all(self) -> None:
        """Drop every cached block (what a vLLM restart does)."""
        self._blocks.clear()
        self._publish([("cleared", [])])

    def is_cached(self, messages: Sequence[Message]) -> bool:
        hashes = self._block_hashes(tokens_of(messages, generation_prompt=False))
        return bool(hashes) and all(h in self._blocks for h in hashes)

    # ----- LLMEngine ----------------------------------------------------------------

    def _check_up(self) -> None:
        if self.down:
            raise LLMUnavailableError("fake vLLM is down")

    async def stream_chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float,
        frequency_penalty: float = 0.0,
        prefix_key: str | None = None,
    ) -> AsyncIterator[TextDelta | Usage]:
        self._check_up()
        tokens = tokens_of(messages, generation_prompt=True)
        self.chats.append(tokens)
        self.penalties.append(frequency_penalty)
        if self.hang:
            await self.release.wait()
        usage = self._run(tokens)
        words = self.answer.split(" ")[:max_tokens]
        for i, word in enumerate(words):
            if self.malformed is not None:
                raise LLMBadResponseError(f"vLLM sent a line that is not JSON: {self.malformed!r}")
            if self.crash_after_deltas is not None and i >= self.crash_after_deltas:
                raise LLMUnavailableError("vLLM's stream ended before [DONE]")
            yield TextDelta(word if i == 0 else " " + word)
            await asyncio.sleep(0)
        yield replace(usage, completion_tokens=len(words))

    async def prefill(
        self,
        messages: Sequence[Message],
        *,
        max_prompt_tokens: int | None = None,
        prefix_key: str | None = None,
        touch: bool = False,
    ) -> Usage:
        self._check_up()
        whole = tokens_of(messages, generation_prompt=touch)
        tokens = whole[: None if max_prompt_tokens is None else max_prompt_tokens + int(touch)]
        if touch:
            self.touches.append(tokens)
        self.prefills.append(tokens)
        await asyncio.sleep(self.prefill_delay_s)
        usage = self._run(tokens)
        return replace(usage, uncut_tokens=len(whole)) if len(tokens) < len(whole) else usage

    async def prefix_token_ids(self, messages: Sequence[Message]) -> list[int] | None:
        self._check_up()
        return self._ids(tokens_of(messages, generation_prompt=False))

    async def cache_config(self) -> CacheConfig:
        self._check_up()
        return CacheConfig(
            block_size=self.block_size,
            num_blocks=self.num_blocks,
            memory_bytes=self.memory_bytes,
            prefix_caching=self.prefix_caching,
        )

    async def kv_usage(self) -> float:
        self._check_up()
        if self.kv_usage_override is not None:
            return self.kv_usage_override
        return len(self._blocks) / self.num_blocks

    async def is_healthy(self) -> bool:
        return not self.down

    async def aclose(self) -> None:
        self.release.set()
