"""Graph quality: do the 3 selected triples hold the answer to a two-step question?

Each of ``WORLDS`` small worlds has a product, the company that makes it, the company's
city, founder, founding year and a partner, as supplied triples in two documents: the
product's (made by, an inverse restatement "builds", who uses it, what it measures, where
it sells) and the company's. The questions name the product and ask about its maker, so
the answering triple is two hops from the question's entity:

    "Where is the company that makes the Aquila soil sensor based?"
        → (Brightfield Instruments, based in, Tamsworth)

The retrieved passage is the product's document (what dense retrieval finds for the
product's name). Reported per selection mode: the share of questions whose answering
triple is among the selected 3, how many selections restate a chosen pair of entities
(an inverse predicate over the same two), and the selection's p50 latency. The real
embedding model; names are invented so that the model knows none of them.

Run: ``.venv/bin/python -m bench.kg_multihop [--worlds 60]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from bench.paths import bench_dir
from bench.scale_records import GraphQualityRow
from kg import KnowledgeGraph, SubgraphSelector, Triple
from kg.paths import PathWeights
from rag.knowledge.embedding import Embedder

PRODUCT_HEADS = [
    "Aquila",
    "Borealis",
    "Cinder",
    "Dovetail",
    "Ember",
    "Fennick",
    "Galloway",
    "Hollin",
    "Isbrand",
    "Juniper",
]
PRODUCT_HEADS += ["Kestrel", "Larkspur"]
PRODUCT_KINDS = ["soil sensor", "irrigation pump", "weather mast", "grain dryer", "crop drone"]
COMPANY_HEADS = [
    "Brightfield",
    "Coldwater",
    "Dunmore",
    "Eastlake",
    "Farrow",
    "Greyholm",
    "Harbridge",
]
COMPANY_HEADS += ["Ironvale", "Kingsmere", "Lowther", "Marlow", "Northgate"]
COMPANY_KINDS = ["Instruments", "Agritech", "Systems", "Devices", "Works"]
CITIES = ["Tamsworth", "Kelbridge", "Orrin Falls", "Pellham", "Quarrendon", "Rosslyn Bay"]
CITIES += ["Stavely", "Thornbury", "Ulverby", "Vantry", "Westmoor", "Yarrowdale"]
PEOPLE = ["Mara Quint", "Tobias Lenk", "Ines Varga", "Oskar Pell", "Leda Marsh", "Rui Ansel"]
PEOPLE += ["Noor Halvey", "Pia Strand", "Edda Krall", "Silas Brenn", "Vera Okafor", "Jon Tallis"]
LOCATED = ["based in", "headquartered in", "located in"]
#: The weights (kg/paths.py) were tuned on these...
QUESTIONS = [
    ("Where is the company that makes the {p} based?", "place"),
    ("In which city is the maker of the {p} headquartered?", "place"),
    ("Who founded the company that makes the {p}?", "founder"),
    ("Who is the founder of the manufacturer of the {p}?", "founder"),
]
#: ...and only measured on these, worded apart from them.
HELD_OUT = [
    ("What town is the producer of the {p} located in?", "place"),
    ("Which person started the firm that builds the {p}?", "founder"),
    ("The {p} comes from a company; where is that company situated?", "place"),
    ("Name the founder of the business behind the {p}.", "founder"),
]


@dataclass(frozen=True)
class World:
    product: str
    company: str
    city: str
    founder: str
    located: str

    def triples(self, i: int) -> dict[str, list[Triple]]:
        p, c = self.product, self.company
        product_doc, company_doc = f"product-{i}", f"company-{i}"
        product = [
            (p, "made by", c),
            (c, "builds", p),
            ("growers", "use", p),
            (p, "measures", "soil moisture"),
            (p, "sold in", "Northern Europe"),
        ]
        company = [
            (c, self.located, self.city),
            (c, "founded by", self.founder),
            (c, "founded in", str(1950 + i)),
            (c, "employs", f"{40 + i} engineers"),
            (c, "partners with", f"{COMPANY_HEADS[(i + 5) % len(COMPANY_HEADS)]} Logistics"),
        ]
        return {
            product_doc: [
                Triple(subject=s, predicate=r, object=o, doc_id=product_doc) for s, r, o in product
            ],
            company_doc: [
                Triple(subject=s, predicate=r, object=o, doc_id=company_doc) for s, r, o in company
            ],
        }

    def answer(self, kind: str) -> tuple[str, str, str]:
        if kind == "place":
            return (self.company, self.located, self.city)
        return (self.company, "founded by", self.founder)


def worlds(count: int) -> list[World]:
    out = []
    for i in range(count):
        head = PRODUCT_HEADS[i % len(PRODUCT_HEADS)]
        kind = PRODUCT_KINDS[(i // len(PRODUCT_HEADS)) % len(PRODUCT_KINDS)]
        company = f"{COMPANY_HEADS[(i * 7) % len(COMPANY_HEADS)]} {COMPANY_KINDS[i % 5]}"
        out.append(
            World(
                product=f"{head} {kind}",
                company=company,
                city=CITIES[(i * 5) % len(CITIES)],
                founder=PEOPLE[(i * 11) % len(PEOPLE)],
                located=LOCATED[i % len(LOCATED)],
            )
        )
    return out


MODES: dict[str, PathWeights | None] = {
    "plain (each triple by its own score)": None,
    "paths, no redundancy penalties": PathWeights(similarity_weight=0.0, same_pair_penalty=0.0),
    "redundancy penalties, no paths": PathWeights(
        intent_bonus=0.0, path_decay=0.0, path_own_weight=0.0
    ),
    "path-aware (default)": PathWeights(),
}


def run(world_count: int) -> list[GraphQualityRow]:
    from rag.knowledge.embedding import shared_embedder

    embedder = shared_embedder()
    embedder.warm_up()
    all_worlds = worlds(world_count)
    documents: dict[str, list[Triple]] = {}
    for i, world in enumerate(all_worlds):
        documents.update(world.triples(i))
    rows: list[GraphQualityRow] = []
    with bench_dir() as folder:
        graph = KnowledgeGraph(Path(folder), embedder.embed_texts, autosave=False)
        graph.replace_documents(documents)
        for questions, label in ((QUESTIONS, "tuned"), (HELD_OUT, "held out")):
            rows.extend(_measure(graph, embedder, all_worlds, questions, label))
    return rows


def _measure(
    graph: KnowledgeGraph,
    embedder: Embedder,
    all_worlds: list[World],
    questions: list[tuple[str, str]],
    label: str,
) -> list[GraphQualityRow]:
    rows: list[GraphQualityRow] = []
    asked = [
        (template.format(p=w.product), w.answer(kind), f"product-{i}")
        for i, w in enumerate(all_worlds)
        for template, kind in questions
    ]
    vectors = embedder.embed_texts([q for q, _, _ in asked])
    for mode, weights in MODES.items():
        selector = SubgraphSelector(graph, path_weights=weights)
        found = restated = 0
        latencies = []
        for (question, answer, doc), vector in zip(asked, vectors, strict=True):
            started = time.perf_counter()
            chosen = selector.select(question, vector, [(doc, f"{doc}#0")])
            latencies.append((time.perf_counter() - started) * 1000)
            facts = [(t.subject, t.predicate, t.object) for t in chosen]
            found += answer in facts
            pairs = [frozenset((s, o)) for s, _, o in facts]
            restated += len(pairs) != len(set(pairs))
        rows.append(
            GraphQualityRow(
                questions_set=label,
                mode=mode,
                questions=len(asked),
                answer_share=found / len(asked),
                restating_selections=restated / len(asked),
                p50_ms=statistics.median(latencies),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=60)
    args = parser.parse_args()
    print(
        f"{'questions':<9} {'mode':<40} {'asked':>6} {'answer in 3':>11} {'restating':>9} "
        f"{'p50 ms':>7}"
    )
    for r in run(args.worlds):
        print(
            f"{r.questions_set:<9} {r.mode:<40} {r.questions:>6} {r.answer_share:>11.1%} "
            f"{r.restating_selections:>9.1%} {r.p50_ms:>7.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
