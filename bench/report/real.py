"""The real-corpus section of the report: its targets (judged within the section: strategy
4 against strategy 1 and the floor of the same run) and its tables."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from bench.measure import RequestRecord, summarize
from bench.real_records import BreakdownMedian, IngestRate, RealResult, RunRate
from bench.report.tables import change_table
from bench.report.tables import table as _table
from bench.report.targets import OURS, PLAIN, Target, target
from bench.scenario_records import StrategyResult
from bench.suite_records import SuiteResults

RESTART_FIRST = 100
QUALITY_COLUMNS = ("recall_at_1", "recall_at_3", "recall_at_10", "mrr", "gold_text_in_prompt")


def _mean(records: Sequence[RequestRecord]) -> float:
    return statistics.mean(r.ttft_ms for r in records) if records else math.nan


def real_targets(results: SuiteResults) -> list[Target]:
    """The targets the issue sets on the real corpus (nothing when the section did not run)."""
    real = results.real
    if real is None:
        return []
    ours, plain = real.strategies.get(OURS), real.strategies.get(PLAIN)
    if not ours or not plain or ours.restart is None or plain.restart is None:
        return []
    first = ours.restart.requests[:RESTART_FIRST]
    first_plain = plain.restart.requests[:RESTART_FIRST]
    hits = sum(r.hit for r in first) / len(first)
    ratio = _mean(first_plain) / _mean(first)
    targets = [
        target(
            "real: restart, first requests warm",
            ">= 90%",
            f"{hits:.0%} of {len(first)} (strategy 1: "
            f"{sum(r.hit for r in first_plain) / len(first_plain):.0%})",
            hits >= 0.9,
            "" if hits >= 0.9 else _restart_why(ours),
        ),
        target(
            "real: restart, mean TTFT vs strategy 1",
            ">= 3x lower",
            f"{ratio:.2f}x ({_mean(first_plain):.0f} -> {_mean(first):.0f} ms)",
            ratio >= 3,
            "" if ratio >= 3 else _ratio_why(first, first_plain),
        ),
    ]
    rewarmable = ours.change_records(warm_before=True)
    if rewarmable:
        share = summarize(rewarmable).hit_share
        targets.append(
            target(
                "real: change, requests to contexts warm before on a re-warmed prefix",
                ">= 95%",
                f"{share:.0%} of {len(rewarmable)}",
                share >= 0.95,
                "" if share >= 0.95 else "see the change table: re-warms that came late",
            )
        )
    floor = real.floor.p50 if real.floor else math.nan
    warm = [r.ttft_ms for r in ours.steady.requests if r.hit]
    if warm and not math.isnan(floor):
        p50 = statistics.median(warm)
        targets.append(
            target(
                "real: warm TTFT p50 / floor p50",
                "<= 1.3x",
                f"{p50 / floor:.2f}x ({p50:.0f} vs {floor:.0f} ms)",
                p50 / floor <= 1.3,
                "" if p50 / floor <= 1.3 else _warm_why(real),
            )
        )
    if rate := real.ingest_rate:
        targets.append(
            target(
                "real: whole ingest vs raw embedding throughput",
                ">= 70%",
                f"{rate.ratio:.1%} ({rate.end_to_end.seconds:.0f} s vs "
                f"{rate.raw.seconds:.0f} s; CPU seconds {rate.cpu_ratio:.1%})",
                rate.ratio >= 0.7,
                "" if rate.ratio >= 0.7 else _ingest_why(rate),
            )
        )
    if quality := real.quality:
        ours_r3 = quality.warmrag.recall_at_3
        base_r3 = quality.llamaindex_defaults.recall_at_3
        targets.append(
            target(
                "real: recall@3 vs llama-index defaults",
                ">= defaults + 0.25",
                f"{ours_r3:.2f} vs {base_r3:.2f} (+{ours_r3 - base_r3:.2f})",
                ours_r3 >= base_r3 + 0.25,
                ""
                if ours_r3 >= base_r3 + 0.25
                else "the defaults' 512-token chunks fit this corpus's sections better than "
                "expected; see the per-question ranks",
            )
        )
    return targets


def _ingest_why(rate: IngestRate) -> str:
    """The stages the whole ingest adds to the knowledge base's own, by CPU seconds."""
    whole, kb = rate.end_to_end.cpu_stages, rate.chunk_only.cpu_stages
    extra = sorted(((v, k) for k, v in whole.items() if k not in kb and v >= 1), reverse=True)
    return "the graph's stages: " + ", ".join(f"{k} {v:.0f} CPU s" for v, k in extra)


def _restart_why(ours: StrategyResult) -> str:
    misses = ours.restart.misses if ours.restart else None
    return "misses by reason: " + ", ".join(f"{k} {v}" for k, v in (misses or {}).items())


def _ratio_why(first: Sequence[RequestRecord], first_plain: Sequence[RequestRecord]) -> str:
    warm = [r.ttft_ms for r in first if r.hit]
    if not warm:
        return ""
    bound = _mean(first_plain) / statistics.mean(warm)
    return (
        f"even with every request warm (warm mean {statistics.mean(warm):.0f} ms) the ratio "
        f"would be {bound:.2f}x: a cold prefill of this context costs "
        f"{_mean(first_plain):.0f} ms on average here"
    )


def _warm_why(real: RealResult) -> str:
    default = real.variants.get("default")
    hits = default.hits.median if default else None
    if hits is None:
        return ""
    return (
        f"a hit's median parts: retrieval {hits.retrieval_ms:.0f} ms, prompt "
        f"{hits.prompt_ms:.0f} ms, to vLLM {hits.to_vllm_ms:.0f} ms, vLLM queue "
        f"{hits.queue_ms:.0f} + prefill {hits.prefill_ms:.0f} ms "
        f"({hits.prompt_tokens - hits.cached_tokens:.0f} tokens computed)"
    )


def real_markdown(real: RealResult | None) -> list[str]:
    lines = ["## Real corpus (Git's documentation)", ""]
    if real is None:
        return [*lines, "Skipped: not run", ""]
    if corpus := real.corpus:  # none where the section failed right after the ingest rate
        lines += [
            f"{corpus.sections} sections ({corpus.words:,} words, median "
            f"{corpus.words_per_section.median} per section) from {corpus.sources} pages "
            f"of the `git-doc` package; {corpus.asked_questions} questions asked.",
            "",
        ]
    if quality := real.quality:
        names = (
            ("warmrag (small-to-big)", quality.warmrag),
            ("warmrag, windows off", quality.warmrag_windows_off),
            ("llama-index defaults (512/50)", quality.llamaindex_defaults),
        )
        lines += _table(
            ["retrieval", "recall@1", "recall@3", "recall@10", "MRR", "gold text in prompt"],
            [
                [label, *(f"{getattr(summary, m):.3f}" for m in QUALITY_COLUMNS)]
                for label, summary in names
            ],
        )
    lines += _strategies_markdown(real.strategies)
    floor = real.floor.p50 if real.floor else math.nan
    lines += [f"Floor (questions alone, straight to vLLM): p50 {floor:.0f} ms.", ""]
    if any(s.change for s in real.strategies.values()):
        lines += ["Knowledge-base changes (requests to the changed contexts after):", ""]
        lines += change_table(real.strategies)
    lines += _ingest_markdown(real.ingest_rate)
    lines += _against_default(real.ingest_int8 or real.ingest_float32, real.ingest_rate)
    lines += _variants_markdown(real)
    if answers := real.answers:
        lines += [
            f"Answers with and without block alignment ({answers.n} questions, greedy): "
            f"{answers.identical} identical.",
            "",
        ]
    return lines


def _strategies_markdown(strategies: dict[str, StrategyResult]) -> list[str]:
    rows = []
    for s in strategies.values():
        for phase, part in (("steady", s.steady), ("restart", s.restart)):
            if part is None:
                continue
            sm = summarize(part.requests)
            rows.append(
                [
                    s.strategy,
                    phase,
                    sm.n,
                    f"{sm.hit_share:.0%}",
                    f"{_mean(part.requests):.0f}",
                    f"{sm.ttft_p50_ms:.0f}",
                    f"{sm.ttft_p99_ms:.0f}",
                ]
            )
    header = ["strategy", "phase", "requests", "warm hits", "TTFT mean ms", "p50", "p99"]
    return _table(header, rows)


#: The TTFT breakdown's columns: a header, and the median's field it shows.
BREAKDOWN = (
    ("client TTFT", "client_ttft_ms"),
    ("hop to warmrag", "hop_ms"),
    ("retrieval", "retrieval_ms"),
    ("prompt", "prompt_ms"),
    ("warmrag to vLLM", "to_vllm_ms"),
    ("vLLM queue", "queue_ms"),
    ("vLLM prefill", "prefill_ms"),
    ("vLLM TTFT", "vllm_ttft_ms"),
    ("prompt tokens", "prompt_tokens"),
    ("cached", "cached_tokens"),
)


def _variants_markdown(real: RealResult) -> list[str]:
    rows = []
    for name, variant in real.variants.items():
        for kind, summary in (("misses", variant.misses), ("hits", variant.hits)):
            median: BreakdownMedian | None = summary.median
            if median is not None:
                rows.append([name, kind, summary.n, *(getattr(median, f) for _, f in BREAKDOWN)])
    if not real.variants:
        return []
    return [
        "TTFT breakdown (medians, ms; each question cold, then again warm):",
        "",
        *_table(["variant", "asked", "n", *(header for header, _ in BREAKDOWN)], rows),
    ]


def _against_default(rate: IngestRate | None, default: IngestRate | None) -> list[str]:
    """Another precision's rates over the default's, measured one after the other."""
    if not rate or not default or rate.precision == default.precision:
        return []
    raw = rate.raw.chunks_per_s / default.raw.chunks_per_s
    whole = rate.end_to_end.chunks_per_s / default.end_to_end.chunks_per_s
    return [
        f"Embedded in {rate.precision} against {default.precision} on the same sections, "
        f"in this run: raw embedding {raw:.2f}x ({default.raw.chunks_per_s:.1f} -> "
        f"{rate.raw.chunks_per_s:.1f} chunks/s), whole ingest {whole:.2f}x "
        f"({default.end_to_end.chunks_per_s:.1f} -> {rate.end_to_end.chunks_per_s:.1f}).",
        "",
    ]


def _ingest_markdown(rate: IngestRate | None) -> list[str]:
    """Raw embedding, the knowledge base alone and the whole ingest on the same sections,
    with the whole ingest's CPU seconds by stage."""
    if not rate:
        return []
    raw = rate.raw
    runs: list[tuple[str, RunRate]] = [
        ("raw embedding of the chunk texts", raw),
        ("knowledge base alone (split, embed, Qdrant, docstore)", rate.chunk_only),
        ("whole ingest (with graph extraction and embeddings)", rate.end_to_end),
    ]
    if rate.parse_beside is not None:
        runs.append(("whole ingest, the graph's parse beside the embedding", rate.parse_beside))
    lines = [f"Ingest of the {rate.documents} sections (one process, no HTTP):", ""]
    lines += _table(
        ["run", "seconds", "chunks/s", "of raw"],
        [
            [
                name,
                f"{run.seconds:.1f}",
                f"{run.chunks_per_s:.1f}",
                f"{run.chunks_per_s / raw.chunks_per_s:.1%}",
            ]
            for name, run in runs
        ],
    )
    stages = sorted(rate.end_to_end.cpu_stages.items(), key=lambda kv: -kv[1])
    lines += [
        "CPU seconds of the whole ingest: "
        + ", ".join(f"{k} {v:.1f}" for k, v in stages)
        + f"; {rate.triples} triples, {rate.nodes} nodes.",
        "",
    ]
    return lines
