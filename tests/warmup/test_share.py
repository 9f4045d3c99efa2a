"""The per-entry share is a budget rule, not a filter, and nothing warmup declines is
silent: against ``FakeEngine`` (blocks of 4 fake tokens, each a word or a template
marker), with real retrieval and the real registry. The real vLLM's side of a cut
prefill is checked in ``tests/api/test_warmup_real_docs.py``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rag.chat.results import WarmState
from rag.knowledge.embedding import Embedder
from tests.fakes import FakeEngine, tokens_of
from tests.warmup.rig import QUESTIONS, Rig
from tests.warmup.test_service import run
from warmup.models import DeclineReason

#: Smaller than every context of the rig's documents (about 60 fake tokens each).
SHARE = 24


def test_a_context_longer_than_the_share_is_warmed_as_far_as_it_allows(
    tmp_path: Path, embedder: Embedder
) -> None:
    async def scenario(rig: Rig) -> None:
        report = await rig.service.add_seed_queries([QUESTIONS["zorn"]])
        assert report.warm_requests == 1 and report.truncated == 1 and not report.declined
        entry = rig.entry_for("zorn")
        whole = tokens_of(entry.messages, generation_prompt=False)
        assert entry.partial and entry.context_tokens == len(whole) > SHARE
        assert entry.prefix_tokens == entry.cached_block_tokens == SHARE
        assert report.truncated_tokens == len(whole) - SHARE
        assert rig.engine.prefills == [whole[:SHARE]]  # the first blocks, nothing else

        result = await rig.ask(QUESTIONS["zorn"])
        assert result.cache.warm_state is WarmState.PARTIAL and not result.cache.warm_hit
        assert result.cache.cached_tokens == SHARE
        assert rig.counter("warmrag_warmup_partial_hits_total") == 1
        assert rig.counter("warmrag_warmup_hits_total") == 0
        assert rig.counter("warmrag_warmup_truncated_total") == 1
        # The chat computed the rest: the whole prefix is cached now, and a chat
        # served all of it from cache is a hit, however it got there.
        again = await rig.ask("what do we know about the RIVER zorn")
        assert again.cache.warm_state is WarmState.HIT

        rig.engine.evict_all()  # a partly warm entry is restored just as far
        restored = await rig.service.restore()
        assert restored.warm_requests == 1 and rig.engine.prefills[-1] == whole[:SHARE]

    run(tmp_path, embedder, scenario, entry_max_tokens=SHARE + 2)


def test_the_default_share_holds_the_largest_prefix_the_builder_makes(
    tmp_path: Path, embedder: Embedder
) -> None:
    async def scenario(rig: Rig) -> None:
        budget = rig.service.budget
        assert budget is not None
        # The rig's chat path: 3 passages of 200 word-pieces, 3 triples, 4-token blocks;
        # more than the seed's quarter of its 4,096-token window.
        assert budget.per_entry_max_tokens == 1164 > 4096 // 4
        report = await rig.service.add_seed_queries([QUESTIONS["zorn"]])
        assert report.truncated == 0 and not rig.entry_for("zorn").partial

    run(tmp_path, embedder, scenario)


def test_a_budget_of_zero_declines_in_the_report_the_metrics_and_one_warning(
    tmp_path: Path, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(rig: Rig) -> None:
        with caplog.at_level(logging.WARNING, logger="warmup.reports"):
            report = await rig.service.add_seed_queries([QUESTIONS["zorn"], QUESTIONS["mars"]])
        assert report.warm_requests == 0
        assert report.declined == {DeclineReason.NO_BUDGET: 2}
        assert report.skipped_over_budget == 2
        sample = rig.metrics.registry.get_sample_value(
            "warmrag_warmup_declined_total", {"reason": "no_budget"}
        )
        assert sample == 2
        assert rig.service.view().declined == {DeclineReason.NO_BUDGET: 2}
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == ["warmup seed: declined 2 no_budget"]

    # 2 GiB of KV memory: the seed's tier gives warmup nothing.
    run(tmp_path, embedder, scenario, engine=FakeEngine(num_blocks=4096, memory_bytes=2 << 30))


def test_a_full_kv_cache_declines_the_rest_of_the_plan(tmp_path: Path, embedder: Embedder) -> None:
    async def scenario(rig: Rig) -> None:
        names = ["zorn", "mars", "rye", "piano", "tea", "owl"]
        report = await rig.service.add_seed_queries([QUESTIONS[n] for n in names])
        assert report.stopped_by_kv_usage
        # Three steps of two: the first step is warmed, then vLLM reads as full.
        assert report.warm_requests == 2
        assert report.declined == {DeclineReason.KV_FULL: 4}

    engine = FakeEngine(num_blocks=4096, kv_usage_override=0.95)
    run(tmp_path, embedder, scenario, engine=engine)
