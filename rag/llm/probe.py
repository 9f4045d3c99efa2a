"""Start-up check that a vLLM server can do what warmup depends on.

Warmup only pays off if vLLM reuses cached prefixes (``--enable-prefix-caching``)
and says so per request (``--enable-prompt-tokens-details``: without it every
chat reads as a miss). The upstream GPU image has neither flag on by default, and
without them warmup would quietly do nothing. So before ``/ready`` turns 200 each
server gets the same prefix twice; the second must report cached tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from rag.llm.client import LLMEngine, LLMError, Usage

#: About 175 tokens: more than one full KV block on any backend (128 tokens on CPU,
#: 16 on GPU), and short, since vLLM-CPU prefills ~150 tokens/s on an AVX2 core.
PROBE_MESSAGES = (
    {
        "role": "system",
        "content": " ".join(
            f"Line {i}: warmrag checks that this server keeps prompt prefixes in its cache."
            for i in range(10)
        ),
    },
)

PREFIX_CACHING_FLAG = "--enable-prefix-caching"
DETAILS_FLAG = "--enable-prompt-tokens-details"


class VLLMSetupError(LLMError):
    """A vLLM server lacks a flag warmup needs; the message names the flags."""

    status_code = 503
    public = "vLLM is missing flags warmup needs (see /ready)"


@dataclass(frozen=True)
class ProbeResult:
    server: str
    prompt_tokens: int
    cached_tokens: int


async def probe(engine: LLMEngine, server: str) -> ProbeResult:
    """Send the probe prefix twice (it also loads the tokenizer and runs a forward pass,
    so the first real request pays for neither); raise ``VLLMSetupError`` naming the
    flags the server is missing."""
    await engine.prefill(PROBE_MESSAGES)
    second = await engine.prefill(PROBE_MESSAGES)
    missing = missing_flags(second, (await engine.cache_config()).prefix_caching)
    if missing:
        raise VLLMSetupError(
            f"vLLM {server} must be started with {' '.join(missing)}: warmup needs prefix "
            "caching and per-request cached-token counts (see README, Deploy on GPUs)"
        )
    return ProbeResult(server, second.prompt_tokens, second.cached_tokens)


def missing_flags(second: Usage, prefix_caching: bool | None) -> list[str]:
    """What the second of two identical requests says about the server's flags."""
    missing = []
    if prefix_caching is False or (second.cached_reported and second.cached_tokens == 0):
        missing.append(PREFIX_CACHING_FLAG)
    if not second.cached_reported:
        missing.append(DETAILS_FLAG)
    return missing
