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
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.chunking_quality import corpus
from bench.harness import MODEL_NAME, ask_all, service, vllm
from bench.paths import bench_dir
from bench.real_corpus import RealWorkload
from bench.real_records import RealSpec
from bench.record import Record
from bench.retrieval_quality import GoldQuestion, gold_text_reaches
from bench.strategies import Overrides
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


class Judged(Record):
    """One answer's citations against its prompt's numbered passages."""

    question: str
    gold: str
    answer: str
    citations: list[int]
    valid: int
    invalid: int
    gold_cited: bool
    gold_citations: int
    gold_in_prompt: bool


def judge(answer: str, shown: list[tuple[str, str]], gold: GoldQuestion) -> Judged:
    numbers = citations(answer)
    valid = [n for n in numbers if 1 <= n <= len(shown)]
    holds = [gold_text_reaches(gold.gold_text, [shown[n - 1][1]]) for n in valid]
    return Judged(
        question=gold.question,
        gold=gold.gold,
        answer=answer,
        citations=numbers,
        valid=len(valid),
        invalid=len(numbers) - len(valid),
        gold_cited=any(holds),
        gold_citations=sum(holds),
        gold_in_prompt=gold_text_reaches(gold.gold_text, [text for _, text in shown]),
    )


class Faithfulness(Record):
    """The shares of the module doc (None: nothing to take a share of)."""

    n: int
    gold_in_prompt: float | None
    cited: float | None
    invalid_citations: float | None
    cited_gold: float | None
    cited_gold_of_citing: float | None
    citation_precision: float | None


def summarize(rows: list[Judged]) -> Faithfulness:
    n = len(rows)
    citing = [r for r in rows if r.valid]
    valid = sum(r.valid for r in rows)

    def share(count: int, of: int) -> float | None:
        return round(count / of, 3) if of else None

    return Faithfulness(
        n=n,
        gold_in_prompt=share(sum(r.gold_in_prompt for r in rows), n),
        cited=share(len(citing), n),
        invalid_citations=share(sum(1 for r in rows if r.invalid), n),
        cited_gold=share(sum(r.gold_cited for r in rows), n),
        cited_gold_of_citing=share(sum(r.gold_cited for r in citing), len(citing)),
        citation_precision=share(sum(r.gold_citations for r in rows), valid),
    )


class FaithfulnessRun(Record):
    summary: Faithfulness
    answers: list[Judged]


class FaithfulnessResult(Record):
    """What ``--out`` writes."""

    corpus: str
    model: str
    answer_tokens: int
    runs: dict[str, FaithfulnessRun]


def run(
    questions: int,
    strategies: Sequence[ChunkingStrategy] = tuple(ChunkingStrategy),
    vllm_url: str | None = None,
    model: str | None = None,
    log: Callable[[str], None] = print,
) -> FaithfulnessResult:
    """``vllm_url`` and ``model``: ask that vLLM and model (a GPU's, a model that
    follows the citation instruction) instead of starting the bundled one."""
    if vllm_url:
        return judge_answers(vllm_url, questions, strategies, model, log)
    with vllm(log=log) as url:
        return judge_answers(url, questions, strategies, None, log)


def judge_answers(
    url: str,
    questions: int,
    strategies: Sequence[ChunkingStrategy],
    model: str | None,
    log: Callable[[str], None],
) -> FaithfulnessResult:
    """The sampled questions asked of the pages corpus under each chunking strategy, each
    answer judged against the passages its prompt numbered."""
    workload = RealWorkload(RealSpec.full())
    data = corpus("pages", workload)
    sample = random.Random(11).sample(data.golds, min(questions, len(data.golds)))
    documents = [d.model_dump() for d in data.documents]
    runs: dict[str, FaithfulnessRun] = {}
    for strategy in strategies:
        settings = Overrides(
            warmup_enabled=False, max_tokens=ANSWER_TOKENS, chunking=strategy, kg_extraction=False
        )
        if model:
            settings["served_model_name"] = model
        with bench_dir() as folder, service(url, folder, **settings) as svc:
            started = time.perf_counter()
            svc.ingest(documents, batch=4)
            log(f"{strategy.value}: ingested in {time.perf_counter() - started:.0f} s")

            def progress(answered: int, name: str = strategy.value) -> None:
                if answered % 10 == 0:
                    log(f"{name}: {answered}/{len(sample)} answered")

            replies = ask_all(svc, [gold.question for gold in sample], progress)
            runtime = svc.server.runtime
            rows = []
            for gold, reply in zip(sample, replies, strict=True):
                found, _ = retrieve_context(
                    runtime.retriever, runtime.builder, gold.question, runtime.settings.top_k
                )
                rows.append(judge(reply.answer, found.prefix.numbered(), gold))
        runs[strategy.value] = FaithfulnessRun(summary=summarize(rows), answers=rows)
        log(f"{strategy.value}: {runs[strategy.value].summary.to_json()}")
    return FaithfulnessResult(
        corpus="pages", model=model or MODEL_NAME, answer_tokens=ANSWER_TOKENS, runs=runs
    )


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
    for name, part in result.runs.items():
        print(name, json.dumps(part.summary.to_json()))
    if args.out:
        args.out.write_text(json.dumps(result.to_json(), indent=2))


if __name__ == "__main__":
    main()
