"""Block alignment: a prefix is padded to whole KV blocks, checked by counting."""

from __future__ import annotations

from collections.abc import Sequence

from rag.alignment import PAD_UNIT, BlockAligner, padded
from rag.prompt import PromptBuilder

Message = dict[str, str]


class WordCounter:
    """Tokens = whitespace-separated words + 5 for the template; counts its calls."""

    def __init__(self, merge_every: int = 0, fail: bool = False) -> None:
        self.calls = 0
        self.merge_every = merge_every  # every n-th pad unit merges with the next
        self.fail = fail

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
