"""Block alignment: a prefix is padded to whole KV blocks, checked by counting."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import httpx

from rag.chat.prompt import PromptBuilder
from rag.llm.alignment import PAD_UNIT, BlockAligner, VLLMTokenCounter, padded

Message = dict[str, str]


class WordCounter:
    """Tokens = whitespace-separated words + 5 for the template; counts its calls."""

    def __init__(self, merge_every: int = 0, fail: bool = False) -> None:
        self.calls = 0
        self.merge_every = merge_every  # every n-th pad unit merges with the next
        self.fail = fail

    def block_size(self) -> int | None:
        return None  # the tests fix it on the aligner

    def count(self, messages: Sequence[Message]) -> int | None:
        self.calls += 1
        if self.fail:
            return None
        text = messages[0]["content"]
        tokens = len(text.split()) + 5
        if self.merge_every:
            tokens -= text.count(PAD_UNIT) // self.merge_every
        return tokens


def test_a_prefix_is_padded_to_whole_blocks_once() -> None:
    counter = WordCounter()
    aligner = BlockAligner(counter, block_size=16)
    system = "one two three four five six seven"
    aligned, tokens = aligner.align(system)
    assert aligned.startswith(system)
    assert counter.count([{"role": "system", "content": aligned}]) == tokens == 16
    calls = counter.calls
    assert aligner.align(system) == (aligned, 16) and counter.calls == calls  # remembered


def test_a_tokenizer_that_merges_pad_units_is_corrected() -> None:
    counter = WordCounter(merge_every=4)
    aligner = BlockAligner(counter, block_size=32)
    aligned, _ = aligner.align("a short system turn")
    assert (counter.count([{"role": "system", "content": aligned}]) or 0) % 32 == 0


def test_without_a_block_size_or_a_count_nothing_is_padded() -> None:
    system = "instruction and passages"
    assert BlockAligner(WordCounter(), block_size=None).align(system) == (system, None)
    assert BlockAligner(WordCounter(fail=True), block_size=16).align(system) == (system, None)


def test_the_prompt_builder_aligns_its_prefix() -> None:
    builder = PromptBuilder(aligner=BlockAligner(WordCounter(), block_size=64))
    prefix = builder.prefix([])
    content = prefix.messages[0]["content"]
    assert content.startswith(PromptBuilder().prefix([]).messages[0]["content"])
    assert (len(content.split()) + 5) % 64 == 0 and prefix.tokens == len(content.split()) + 5
    assert padded("x", 0) == "x"


def counter_with(handler: Callable[[httpx.Request], httpx.Response]) -> VLLMTokenCounter:
    counter = VLLMTokenCounter("http://vllm.test", "model")
    counter._http = httpx.Client(
        base_url="http://vllm.test", transport=httpx.MockTransport(handler)
    )
    return counter


def test_a_vllm_without_tokenize_is_asked_once_and_prefixes_stay_unaligned() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(404)

    aligner = BlockAligner(counter_with(handler), block_size=16)
    assert aligner.align("a") == ("a", None) and aligner.align("b") == ("b", None)
    assert calls == ["/tokenize"]


def test_a_vllm_that_is_down_leaves_the_prefix_unaligned_until_it_answers() -> None:
    up = False

    def handler(request: httpx.Request) -> httpx.Response:
        if not up:
            raise httpx.ConnectError("connection refused", request=request)
        words = len(json.loads(request.content)["messages"][0]["content"].split())
        return httpx.Response(200, json={"count": words + 5})

    aligner = BlockAligner(counter_with(handler), block_size=16)
    assert aligner.align("one two") == ("one two", None)  # served, unaligned, not remembered
    up = True
    aligned, tokens = aligner.align("one two")
    assert tokens == 16 and aligned.startswith("one two")
