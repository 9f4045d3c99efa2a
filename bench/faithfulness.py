"""A faithfulness proxy: when an answer cites a passage as [n], does that passage hold
the gold text?

The prompt asks the model to cite passages by number (``rag.chat.prompt.INSTRUCTION``). On
the real corpus each question has a gold paragraph (the first prose paragraph of its
section, ``bench.real_corpus``), so an answer can be scored without a judge model:

- ``gold_in_prompt``: the gold paragraph is inside one of the prompt's passages (the
  ceiling: nothing can cite what retrieval did not bring);
- ``cited``: the answer cites at least one passage that exists ([n] with n within the
  prompt's passages); ``invalid_citations``: answers citing a number that does not;
- ``cited_gold``: the answer cites a passage holding the gold paragraph, of all
  questions (the proxy), and of the answers that cite at all;
- ``citation_precision``: of all valid citations, the share pointing at such a passage.

Each run asks the same seeded sample of questions through ``POST /v1/chat`` (greedy,
``ANSWER_TOKENS``), with the corpus shaped as source pages (``bench.chunking_quality``)
and chunked by the ``sentence`` splitter, then by ``structure`` (the before and after
of issue 15's passage change; the graph is off, as it does not change passages). The
[n] of an answer is mapped to the passage its prompt numbered n
(``PromptPrefix.numbered``), re-rendered from the same retrieval.

With the bundled SmolLM2-135M no answer cites at all (0 of 80 on 2026-12-02: the model
does not follow the instruction), so the proxy needs a larger model: ``--vllm-url`` and
``--model`` point the run at one (a GPU's vLLM).

Run: ``.venv/bin/python -m bench.faithfulness [--questions N] [--out FILE.json]
[--vllm-url URL --model NAME]`` (about 35 minutes for 40 questions and both strategies
on 2 cores: a cold ~1.3k-token prefill and 96 answer tokens take 15–25 s here).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.chunking_quality import corpus
from bench.harness import MODEL_NAME, bench_dir, service, vllm
from bench.real_corpus import RealSpec, RealWorkload
from bench.retrieval_quality import GoldQuestion, gold_text_reaches
from rag.chat.memo import retrieve_context
from rag.knowledge.models import ChunkingStrategy

ANSWER_TOKENS = 96
_CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def citations(answer: str) -> list[int]:
    """The passage numbers an answer cites, in order, each once: [2], [1, 3]."""
    found: list[int] = []
    for group in _CITATION.findall(answer):
        for number in group.split(","):
            if int(number) not in found:
                found.append(int(number))
    return found


def judge(answer: str, shown: list[tuple[str, str]], gold: GoldQuestion) -> dict[str, Any]:
    """One answer's citations against its prompt's numbered passages."""
    numbers = citations(answer)
    valid = [n for n in numbers if 1 <= n <= len(shown)]
    holds = [gold_text_reaches(gold.gold_text, [shown[n - 1][1]]) for n in valid]
    return {
        "question": gold.question,
        "gold": gold.gold,
        "answer": answer,
        "citations": numbers,
        "valid": len(valid),
        "invalid": len(numbers) - len(valid),
        "gold_cited": any(holds),
        "gold_citations": sum(holds),
        "gold_in_prompt": gold_text_reaches(gold.gold_text, [text for _, text in shown]),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    citing = [r for r in rows if r["valid"]]
    valid = sum(r["valid"] for r in rows)

    def share(count: int, of: int) -> float | None:
        return round(count / of, 3) if of else None

    return {
        "n": n,
        "gold_in_prompt": share(sum(r["gold_in_prompt"] for r in rows), n),
        "cited": share(len(citing), n),
        "invalid_citations": share(sum(1 for r in rows if r["invalid"]), n),
        "cited_gold": share(sum(r["gold_cited"] for r in rows), n),
        "cited_gold_of_citing": share(sum(r["gold_cited"] for r in citing), len(citing)),
        "citation_precision": share(sum(r["gold_citations"] for r in rows), valid),
    }


def run(
    questions: int,
    strategies: Sequence[ChunkingStrategy] = tuple(ChunkingStrategy),
    vllm_url: str | None = None,
    model: str | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """``vllm_url`` and ``model``: ask that vLLM and model (a GPU's, a model that
    follows the citation instruction) instead of starting the bundled one."""
    if vllm_url:
        return ask_all(vllm_url, questions, strategies, model, log)
    with vllm(log=log) as url:
        return ask_all(url, questions, strategies, None, log)


def ask_all(
    url: str,
    questions: int,
    strategies: Sequence[ChunkingStrategy],
    model: str | None,
    log: Any,
) -> dict[str, Any]:
    workload = RealWorkload(RealSpec.full())
    data = corpus("pages", workload)
    sample = random.Random(11).sample(data.golds, min(questions, len(data.golds)))
    documents = [d.model_dump() for d in data.documents]
    result: dict[str, Any] = {
        "corpus": "pages",
        "model": model or MODEL_NAME,
        "answer_tokens": ANSWER_TOKENS,
        "runs": {},
    }
    served = {"served_model_name": model} if model else {}
    for strategy in strategies:
        with (
            bench_dir() as folder,
            service(
                url,
                folder,
                warmup_enabled=False,
                max_tokens=ANSWER_TOKENS,
                chunking=strategy,
                kg_extraction=False,
                **served,
            ) as svc,
        ):
            started = time.perf_counter()
            svc.ingest(documents, batch=4)
            log(f"{strategy.value}: ingested in {time.perf_counter() - started:.0f} s")
            runtime = svc.server.runtime
            rows = []
            for i, gold in enumerate(sample, 1):
                answer = svc.chat(gold.question)["answer"]
                found, _ = retrieve_context(
                    runtime.retriever, runtime.builder, gold.question, runtime.settings.top_k
                )
                rows.append(judge(answer, found.prefix.numbered(), gold))
                if i % 10 == 0:
                    log(f"{strategy.value}: {i}/{len(sample)} answered")
        result["runs"][strategy.value] = {"summary": summarize(rows), "answers": rows}
        log(f"{strategy.value}: {result['runs'][strategy.value]['summary']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=40, help="questions asked per run")
    parser.add_argument("--out", type=Path, help="also write the result here (JSON)")
    parser.add_argument(
        "--chunking", type=ChunkingStrategy, action="append", help="only this strategy"
    )
    parser.add_argument("--vllm-url", help="ask this vLLM instead of starting the bundled one")
    parser.add_argument("--model", help="the model name that vLLM serves (with --vllm-url)")
    args = parser.parse_args()
    strategies = args.chunking or tuple(ChunkingStrategy)
    result = run(args.questions, strategies, args.vllm_url, args.model)
    for name, part in result["runs"].items():
        print(name, json.dumps(part["summary"]))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
