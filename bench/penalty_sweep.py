"""How often the bundled model repeats itself, by frequency penalty, at the service's
answer length.

``bench.model_compare`` caps answers at 128 tokens, which caps how often an answer can
repeat. This asks the same seeded questions of SmolLM2 alone, at ``ANSWER_TOKENS`` (the
service's ``max_tokens``), with the repeat guard off so that every repeat counts, once
per penalty, one configuration after the other; answers are scored as
``bench.model_compare`` scores them (``rag.chat.repetition.repeats``, gold facts).
The result chose the default ``WARMRAG_CHAT_FREQUENCY_PENALTY`` (docs/models.md).

``--orders stable,rank`` sweeps ``WARMRAG_PASSAGE_ORDER`` instead, at the first penalty,
at 128 answer tokens and with the guard on (the service's defaults otherwise): whether
answers change with the passages' order (docs/warmup.md, "Passage order").

Run: ``.venv/bin/python -m bench.penalty_sweep [--questions 12] [--penalties 0.5,1.0]
[--orders stable,rank] [--out FILE.jsonl]`` (about 6 minutes per configuration for 12
questions on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import random
from contextlib import ExitStack
from pathlib import Path

from bench import model_compare
from bench.chunking_quality import corpus
from bench.harness import service, vllm
from bench.model_records import summaries_of
from bench.real_corpus import RealWorkload
from bench.real_records import RealSpec
from bench.strategies import Overrides
from rag.chat.prompt import PassageOrder
from rag.llm.bundled_model import ChatModel

ANSWER_TOKENS = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=12)
    parser.add_argument("--penalties", default="0.5,1.0", help="comma-separated")
    parser.add_argument("--orders", help="comma-separated passage orders to sweep instead")
    parser.add_argument("--out", type=Path, help="each answer as a JSON line")
    args = parser.parse_args()
    model_compare.ANSWER_TOKENS = 128 if args.orders else ANSWER_TOKENS
    model = ChatModel.SMOLLM2_135M
    data = corpus("pages", RealWorkload(RealSpec.full()))
    sample = random.Random(11).sample(data.golds, min(args.questions, len(data.golds)))
    documents = [d.model_dump() for d in data.documents]
    penalties = [float(p) for p in args.penalties.split(",")]
    configs = (
        [
            (
                order,
                Overrides(chat_frequency_penalty=penalties[0], passage_order=PassageOrder(order)),
            )
            for order in args.orders.split(",")
        ]
        if args.orders
        else [
            (f"penalty-{p}", Overrides(chat_frequency_penalty=p, chat_stop_on_repeat=False))
            for p in penalties
        ]
    )
    answers = []
    with ExitStack() as stack:
        url = stack.enter_context(
            vllm(kv_cache_gib=model_compare.KV_GIB, enforce_eager=True, chat_model=model)
        )
        folders = stack.enter_context(
            model_compare.knowledge_copies({model: url}, documents, print)
        )
        for name, config in configs:
            settings = model_compare.settings_for(model, config)
            with service(url, folders[model], **settings) as svc:
                for i, gold in enumerate(sample, 1):
                    rows, _ = model_compare.ask_question(svc, url, model, name, gold)
                    answers.extend(rows)
                    if args.out:
                        with args.out.open("a") as out:
                            out.writelines(json.dumps(r.to_json()) + "\n" for r in rows)
                    print(f"{name}: {i}/{len(sample)}", flush=True)
    summaries = summaries_of(answers, [name for name, _ in configs], {model.value: []})
    for name, summary in summaries[model.value].items():
        print(name, json.dumps(summary.to_json()))


if __name__ == "__main__":
    main()
