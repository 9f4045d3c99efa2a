"""The real-corpus section of the report: its targets judged within the section, its
tables written. The numbers are made up; the judgement and layout are under test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import write_report
from bench.report.real import real_markdown, real_targets
from bench.suite_records import SuiteResults
from tests.bench.test_report import parsed, strategy


def row(client: float, tokens: int, cached: int) -> dict[str, Any]:
    parts = ("hop_ms", "retrieval_ms", "prompt_ms", "to_vllm_ms", "queue_ms", "prefill_ms")
    median = {p: 1.0 for p in parts}
    median.update(client_ttft_ms=client, vllm_ttft_ms=client - 5, prompt_tokens=tokens,
                  cached_tokens=cached)  # fmt: skip
    return {"n": 4, "hits": 4 if cached else 0, "reused": 0, "median": median}


def real(ours_restart_ms: float, recall: float) -> dict[str, Any]:
    quality: dict[str, Any] = {
        k: {"n": 3, "recall_at_1": r, "recall_at_3": r, "recall_at_10": r, "mrr": r,
            "gold_text_in_prompt": r}
        for k, r in (("warmrag", recall), ("warmrag_windows_off", recall),
                     ("llamaindex_defaults", 0.5))
    }  # fmt: skip
    quality.update(
        llamaindex_index_s=1.0,
        retrieval_ms_per_question=2.0,
        fixed_vs_defaults=[],
        broken_vs_defaults=[],
        per_question=[],
    )
    return {
        "meta": {"started": "t"},
        "real": {
            "corpus": {
                "sections": 3,
                "words": 900,
                "words_per_section": {"median": 300, "p90": 400, "max": 500},
                "capped_sections": 0,
                "questions": 3,
                "sources": 2,
                "asked_questions": 2,
            },
            "floor": {"n": 3, "ttft_ms": [100.0, 110.0, 120.0]},
            "quality": quality,
            "strategies": {
                "s1": strategy(1, 900.0, 900.0, hits=False),
                "s4": strategy(4, 120.0, ours_restart_ms, hits=True),
            },
            "variants": {
                "default": {
                    "overrides": {},
                    "misses": row(900, 1300, 0),
                    "hits": row(130, 1300, 1280),
                    "rows": {"misses": [], "hits": []},
                }
            },
            "answers": {"n": 2, "identical": 2, "mean_words": {}, "examples": []},
        },
    }


def test_met_targets_on_the_real_corpus() -> None:
    targets = {t.name: t for t in real_targets(parsed(real(120.0, 0.8)))}
    assert all(t.met for t in targets.values()), targets
    assert "real: recall@3 vs llama-index defaults" in targets
    assert targets["real: restart, mean TTFT vs strategy 1"].measured.startswith("7.50x")


def test_missed_targets_on_the_real_corpus_say_why() -> None:
    targets = {t.name: t for t in real_targets(parsed(real(450.0, 0.6)))}
    ratio = targets["real: restart, mean TTFT vs strategy 1"]
    assert ratio.met is False and "2.00x" in ratio.measured and ratio.why
    recall = targets["real: recall@3 vs llama-index defaults"]
    assert recall.met is False and "+0.10" in recall.measured and recall.why


def test_no_real_section_gives_no_targets_and_says_so() -> None:
    assert real_targets(SuiteResults.model_validate({"meta": {}})) == []
    assert "Skipped" in "\n".join(real_markdown(None))


def test_the_section_lays_out_quality_strategies_and_the_breakdown() -> None:
    text = "\n".join(real_markdown(parsed(real(120.0, 0.8)).real))
    assert "llama-index defaults (512/50)" in text and "| 4. s | restart |" in text
    assert "TTFT breakdown" in text and "| default | hits | 4 | 130 |" in text
    assert "2 identical" in text


def ingest_rate(raw_s: float, whole_s: float) -> dict[str, Any]:
    def run(seconds: float, stages: dict[str, float]) -> dict[str, Any]:
        return {
            "seconds": seconds,
            "cpu_seconds": seconds,
            "chunks": 100,
            "words": 1000,
            "cpu_stages": stages,
        }

    return {
        "documents": 3,
        "batch_size": 20,
        "embedder_threads": 1,
        "raw": run(raw_s, {}),
        "chunk_only": run(raw_s + 5, {"chunk embedding": raw_s}),
        "end_to_end": run(
            whole_s,
            {"chunk embedding": raw_s, "spacy extraction": 9.0, "node/triple embedding": 20.0},
        ),
        "triples": 30,
        "nodes": 20,
        "ratio": raw_s / whole_s,
        "cpu_ratio": raw_s / whole_s,
    }


def test_the_ingest_target_names_the_graph_stages_when_missed() -> None:
    data = real(120.0, 0.8)
    data["real"]["ingest_rate"] = ingest_rate(60.0, 100.0)
    [ingest] = [t for t in real_targets(parsed(data)) if t.name.startswith("real: whole ingest")]
    assert ingest.met is False and ingest.measured.startswith("60.0%")
    assert (
        ingest.why == "the graph's stages: node/triple embedding 20 CPU s, spacy extraction 9 CPU s"
    )
    data["real"]["ingest_rate"] = ingest_rate(80.0, 100.0)
    [ingest] = [t for t in real_targets(parsed(data)) if t.name.startswith("real: whole ingest")]
    assert ingest.met is True and not ingest.why


def test_a_real_only_run_reports_its_changes_and_ingest_and_skips_the_rest(tmp_path: Path) -> None:
    data = real(120.0, 0.8)
    data["real"]["ingest_rate"] = ingest_rate(60.0, 100.0)
    paths = write_report(parsed(data), tmp_path / "run")
    assert sorted(p.name for p in paths) == ["report.md", "results.json"]  # no empty plots
    text = (tmp_path / "run" / "report.md").read_text()
    assert "strategies 1 and 4 ran" not in text  # the main section was not asked for
    assert "## Steady state, restart, change\n\nSkipped: not among the sections run" in text
    assert "Knowledge-base changes (requests to the changed contexts after)" in text
    assert "| 4. s | 1 changed |" in text
    assert "| whole ingest (with graph extraction and embeddings) | 100.0 | 1.0 | 60.0% |" in text
    assert "parse beside" not in text  # a run before it: no row
    assert "## Plots" not in text


def test_the_ingest_with_the_parse_beside_the_embedding_has_its_row(tmp_path: Path) -> None:
    data = real(120.0, 0.8)
    data["real"]["ingest_rate"] = ingest_rate(60.0, 100.0)
    data["real"]["ingest_rate"]["parse_beside"] = ingest_rate(60.0, 80.0)["end_to_end"]
    write_report(parsed(data), tmp_path / "run")
    text = (tmp_path / "run" / "report.md").read_text()
    row = "| whole ingest, the graph's parse beside the embedding | 80.0 | 1.2 | 75.0% |"
    assert row in text


def test_int8s_ingest_is_reported_against_the_defaults(tmp_path: Path) -> None:
    data = real(120.0, 0.8)
    data["real"]["ingest_rate"] = ingest_rate(60.0, 100.0)
    data["real"]["ingest_int8"] = ingest_rate(20.0, 50.0) | {"precision": "int8"}
    write_report(parsed(data), tmp_path / "run")
    text = (tmp_path / "run" / "report.md").read_text()
    assert (
        "Embedded in int8 against float32 on the same sections, in this run: raw "
        "embedding 3.00x (1.7 -> 5.0 chunks/s), whole ingest 2.00x (1.0 -> 2.0)." in text
    )
    del data["real"]["ingest_int8"]  # a run before int8: no comparison
    write_report(parsed(data), tmp_path / "old")
    assert "Embedded in int8" not in (tmp_path / "old" / "report.md").read_text()


def test_float32s_ingest_is_reported_against_an_int8_default(tmp_path: Path) -> None:
    """On an x86 CPU with AVX2 the default is int8: float32 is the one measured
    beside it."""
    data = real(120.0, 0.8)
    data["real"]["ingest_rate"] = ingest_rate(20.0, 50.0) | {"precision": "int8"}
    data["real"]["ingest_float32"] = ingest_rate(60.0, 100.0)
    write_report(parsed(data), tmp_path / "run")
    text = (tmp_path / "run" / "report.md").read_text()
    assert (
        "Embedded in float32 against int8 on the same sections, in this run: raw "
        "embedding 0.33x (5.0 -> 1.7 chunks/s), whole ingest 0.50x (2.0 -> 1.0)." in text
    )
