"""``bench.detection_real`` on a small corpus: the product's detection flags no fewer
contexts than really changed, and no more than the looser ways it is compared with."""

from __future__ import annotations

from pathlib import Path

from api.config import Settings
from bench.detection_real import VARIANTS, measure
from rag.knowledge.embedding import Embedder
from rag.knowledge.models import DocumentIn
from tests.warmup.rig import DOCS, QUESTIONS, topic

#: Sentences near some questions, each in a document of its own (their facts are what
#: the looser tests let through).
NEARBY = (
    "Farmers grow rye near the river.",
    "Astronomers watch the planet at night.",
    "Pianists play the piano in the evening.",
    "Birders photograph owls in winter.",
)


def test_each_variant_is_measured_against_the_contexts_that_changed(
    tmp_path: Path, embedder: Embedder
) -> None:
    nearby = [DocumentIn(id=f"nearby-{i}", text=text) for i, text in enumerate(NEARBY)]
    revisions = [
        # The same sentence under a heading: its facts are not new to the graph.
        DocumentIn(id="nearby-0", text=f"Notes\n\n{NEARBY[0]}"),
        # A new fact about the river: the river's contexts change.
        topic("zorn-0", "The river Zorn", "The river Zorn is green. Anna Berg founded Kellerby."),
    ]
    settings = Settings(data_dir=tmp_path, seed_sample_kb=False)
    logged: list[str] = []
    questions = list(QUESTIONS.values())
    result = measure(settings, embedder, [*DOCS, *nearby], questions, revisions, logged.append)
    assert result.documents == len(DOCS) + len(NEARBY) and result.contexts == len(QUESTIONS)
    assert len(result.changes) == 2 and len(logged) == 3  # the ingest, then each change
    reheaded, founded = result.changes
    assert reheaded.new_facts == 0
    assert founded.doc_id == "zorn-0" and founded.new_facts >= 1 and founded.changed >= 1
    for change in result.changes:
        rows = [change.variants[v] for v in VARIANTS]
        assert all(r.missed == 0 for r in rows), change
        assert rows[0].affected >= rows[1].affected >= rows[2].affected >= change.changed
    # Measured: 4, 3 and 1 of the 6 contexts.
    lowest, own, product = (reheaded.variants[v].affected for v in VARIANTS)
    assert lowest > own > product, reheaded
