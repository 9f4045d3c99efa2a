"""Warmup on real documents of realistic length, with the default settings, through the
whole pipeline: real vLLM, the real embedding model, Qdrant, the knowledge graph and
the HTTP app.

Pages of Git's documentation (``tests/data/git-doc``: one in HTML, two in Markdown)
make prefixes of 1,000-2,000 tokens, as small-to-big windows make them for any real
knowledge base. Short made-up documents hid that warmup dropped every such context
(a per-entry share of 1,024 tokens): each test here fails on that build.

The tests share one ingested knowledge base and run in file order: the change test
uses the entries the seed and hot tests warmed, and the restart test restarts the
service, near the end. The stash-list and GPG pairs below retrieve the same passages and
triples for both wordings with the documents in int8 (7-bit weights, the default on x86)
and in float32, and the questions in float32 and in int8, before and after the change
test's edit (checked on this corpus, 2026-12-07); the stash-show pair, whose test warms
its first 640 tokens, keeps its first passages (its third differs with float32
documents). Fewer rewordings keep the prefix than one would think: "How can I create
an annotated tag?", this module's hot question before, takes another third passage
than its "How do I" with int8 documents (0.4011 against 0.4084); the suite ran it on
float32 documents only because an earlier test's knowledge base had made the
session's embedder follow float32 (``conftest`` now gives each test the embedder as
the session made it). On the real corpus 104-106 of 244 rule-made rewordings keep it
(``bench.precision_quality``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rag.knowledge.embedding import Embedder, default_precision
from rag.llm.server import VLLMServer
from tests.api.test_warmup import entry_for, reset_prefix_cache, seed
from tests.conftest import Service, Services

PAGES = Path(__file__).resolve().parent.parent / "data" / "git-doc"
# An HTML page's question (seeded), and a Markdown page's (hot traffic).
STASH_Q, STASH_REWORDED = "How do I list the stash entries?", "How can I list the stash entries?"
TAG_Q, TAG_REWORDED = "How do I sign a tag with GPG?", "How can I sign a tag with GPG?"
TAG_KEY = "how do i sign a tag with gpg"
STASH_KEY = "how do i list the stash entries"
SHOW_Q = "How do I show the changes recorded in a stash entry?"
SHOW_REWORDED = "How can I show the changes recorded in a stash entry?"
#: What the issue that brought these tests asks of a warm hit.
MIN_CACHED_SHARE = 0.9
#: A per-entry share smaller than these contexts: they are warmed only that far.
SMALL_SHARE = 640


@dataclass
class Corpus:
    """The module's service (replaced by a restart) on its ingested pages."""

    services: Services
    start: Any
    service: Service


def ingest_file(service: Service, path: Path, body: bytes | None = None) -> dict[str, Any]:
    """Ingest a page as ``warmrag ingest`` does: by its suffix, its name as its id."""
    resp = service.client.post(
        "/admin/documents/files",
        params={"path": path.name},
        content=path.read_bytes() if body is None else body,
        headers={**service.admin(), "content-type": "application/octet-stream"},
    )
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


@pytest.fixture(scope="module")
def corpus(
    vllm: VLLMServer, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Corpus]:
    # The default documents' runtime, not one an earlier test's knowledge base chose.
    assert embedder.identity == embedder.identity_in(default_precision())
    services = Services(embedder, tmp_path_factory.mktemp("real-docs") / "data")

    def start(**overrides: Any) -> Service:
        return services.start(vllm_url=vllm.url, **overrides)

    service = start(warmup_document_queries=True)  # the default, which conftest turns off
    for page in sorted(PAGES.glob("git-*")):
        assert ingest_file(service, page)["added"] == [page.name]
    service.warmup_cycle()  # detection for the ingest, before the tests' own changes
    try:
        yield Corpus(services, start, service)
    finally:
        services.stop_all()


def assert_warm_hit(body: dict[str, Any], entry: dict[str, Any]) -> None:
    """A warm hit as the issue defines it: ``warm_hit``, and at least 90 % of the
    prompt's tokens from vLLM's cache, on a 1,000-2,500-token context."""
    cache = body["cache"]
    assert 1000 <= entry["prefix_tokens"] <= 2500, entry
    assert cache["warm_state"] == "hit" and cache["warm_hit"] is True, cache
    assert cache["cached_tokens"] >= entry["cached_block_tokens"], cache
    assert cache["cached_tokens"] >= MIN_CACHED_SHARE * cache["prompt_tokens"], cache


def test_a_seeded_question_is_a_warm_hit_for_its_rewording(
    corpus: Corpus, vllm: VLLMServer
) -> None:
    service = corpus.service
    metrics = service.client.get("/metrics").text
    assert 'warmrag_rewarm_total{reason="predicted"}' in metrics  # the ingest's, by default
    assert 'warmrag_rewarm_total{reason="seed"}' not in metrics
    reset_prefix_cache(vllm)
    report = seed(service, STASH_Q)
    assert report["warm_requests"] == 1 and report["declined"] == {}, report
    entry = entry_for(service, STASH_KEY)
    assert entry["doc_ids"] == ["git-stash.html"] and entry["context_tokens"] is None
    assert entry["ttl_s"] > 0 and entry["partial"] is False
    assert_warm_hit(service.chat(STASH_REWORDED), entry)
    assert entry_for(service, STASH_KEY)["hits"] == 1
    metrics = service.client.get("/metrics").text
    assert "warmrag_warmup_hit_ratio 1.0" in metrics
    assert 'warmrag_rewarm_total{reason="seed"} 1.0' in metrics


def test_hot_traffic_is_warmed(corpus: Corpus) -> None:
    """The chat left its prefix in vLLM's cache, so the hot cycle's prefill computes
    only its tail (the seed test shows a prefill warming an empty cache); a hit then
    needs the entry the hot cycle registers, which the old planner dropped."""
    service = corpus.service
    asked = service.chat(TAG_Q)  # one sighting makes a question hot
    assert asked["cache"]["warm_state"] == "cold"
    hot = next(r for r in service.warmup_cycle() if r["kind"] == "hot")
    assert hot["warm_requests_by_reason"] == {"hot": 1} and hot["declined"] == {}, hot
    entry = entry_for(service, TAG_KEY)
    assert entry["doc_ids"] == ["git-tag.md"]
    assert_warm_hit(service.chat(TAG_REWORDED), entry)


def test_a_change_rewarms_exactly_the_changed_context(corpus: Corpus) -> None:
    service = corpus.service
    seed(service, STASH_Q, TAG_Q)  # warm already when run in order: no prefill
    stash = entry_for(service, STASH_KEY)
    tag = entry_for(service, TAG_KEY)
    passage = service.chat(TAG_Q)["passages"][0]["text"]
    page = PAGES / "git-tag.md"
    text = page.read_text()
    sentence = passage.split(". ")[0]
    assert sentence in text
    edited = text.replace(sentence, sentence + " (as of this release)", 1)
    assert ingest_file(service, page, edited.encode())["updated"] == ["git-tag.md"]

    before = {tuple(e["queries"]): e for e in service.registry()["entries"]}
    change = next(r for r in service.warmup_cycle() if r["kind"] == "kb_change")
    after = {tuple(e["queries"]): e for e in service.registry()["entries"]}
    moved = {q for q, e in before.items() if after[q]["fingerprint"] != e["fingerprint"]}
    # The tag question's context, and any question predicted from the page whose
    # context held the edited passage; nothing built from other pages.
    assert tuple(tag["queries"]) in moved
    assert all("git-tag.md" in before[q]["doc_ids"] for q in moved), moved
    assert change["rewarmed"] == len(moved) == change["warm_requests"], change
    # The page's other entries kept their bytes, so their fingerprints, but take the
    # updated page's chunk ids (a restart's check finds chunks by id).
    kept = [q for q in before if q not in moved and "git-tag.md" in before[q]["doc_ids"]]
    assert kept, "no entry of the page kept its context"
    for q in kept:
        assert after[q]["chunk_ids"] != before[q]["chunk_ids"], q
    new_tag = entry_for(service, TAG_KEY)
    assert new_tag["fingerprint"] != tag["fingerprint"]
    assert entry_for(service, STASH_KEY)["fingerprint"] == stash["fingerprint"]
    fingerprints = {e["fingerprint"] for e in service.registry()["entries"]}
    assert tag["fingerprint"] not in fingerprints
    body = service.chat(TAG_REWORDED)
    assert any("(as of this release)" in p["text"] for p in body["passages"])
    assert_warm_hit(body, new_tag)


def test_a_restart_restores_and_hits(corpus: Corpus, vllm: VLLMServer) -> None:
    service = corpus.service
    """The two entries users asked for are the hottest, so they are restored before
    ``/ready``; the predicted ones (seeds with no sighting) follow in the background,
    past a start-up cap of two. The cap keeps this test to two prefills of these
    contexts (about 4.5 s each on the CPU) rather than all eleven; restoring past the
    cap is tested on short documents (``test_warmup``)."""
    service = corpus.service
    seed(service, STASH_Q)  # warm already when run in order: no prefill
    asked = {key: entry_for(service, key) for key in (STASH_KEY, TAG_KEY)}
    warm = len(service.registry()["entries"])
    assert warm > len(asked), "no predicted entry to restore after /ready"
    service.stop()
    reset_prefix_cache(vllm)  # a restarted vLLM starts cold
    # The restarted service has a per-entry share smaller than these contexts, for the
    # next test; entries restored keep the size they were warmed at.
    corpus.service = corpus.start(
        warmup_entry_max_tokens=SMALL_SHARE, warmup_restore_max_entries=len(asked)
    )  # once /ready is 200
    assert len(corpus.service.registry()["entries"]) == warm, "an entry was dropped"
    restored = {key: entry_for(corpus.service, key) for key in asked}
    for key, before in asked.items():
        assert restored[key]["fingerprint"] == before["fingerprint"]
        assert restored[key]["warmed_at"] > before["warmed_at"], key
    reports = corpus.service.client.get("/admin/warmup/reports", headers=corpus.service.admin())
    restore = next(r for r in reports.json() if r["kind"] == "restore")
    assert restore["warm_requests"] == len(asked) and restore["declined"] == {}, restore
    metrics = corpus.service.client.get("/metrics").text
    assert "warmrag_cold_start_total 1.0" in metrics
    assert_warm_hit(corpus.service.chat(STASH_REWORDED), restored[STASH_KEY])


def test_a_context_longer_than_the_share_is_warmed_as_far_as_it_allows(
    corpus: Corpus,
) -> None:
    """Only the first 640 tokens are warmed (a completion on the prefix's token ids):
    vLLM serves exactly those blocks from cache for a chat on the whole prefix, and
    the chat says ``partial``, not a hit."""
    service = corpus.service
    report = seed(service, SHOW_Q)
    assert report["truncated"] == 1 and report["warm_requests"] == 1, report
    entry = entry_for(service, "how do i show the changes recorded in a stash entry")
    assert entry["prefix_tokens"] == SMALL_SHARE and entry["context_tokens"] > SMALL_SHARE
    cache = service.chat(SHOW_REWORDED)["cache"]
    assert cache["warm_state"] == "partial" and cache["warm_hit"] is False, cache
    assert cache["cached_tokens"] == SMALL_SHARE, cache
    metrics = service.client.get("/metrics").text
    assert "warmrag_warmup_partial_hits_total 1.0" in metrics
    assert "warmrag_warmup_truncated_total 1.0" in metrics
