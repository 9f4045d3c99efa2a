"""The knowledge graph through the service: ingest, admin views, prompts, restart."""

from __future__ import annotations

from tests.conftest import Service, ServiceFactory

CURIE = {
    "id": "curie",
    "text": "Marie Curie discovered polonium. Marie Curie was born in Warsaw.",
    "triples": [["Marie Curie", "won", "Nobel Prize in Physics"]],
}
PARIS = {"id": "paris", "text": "Marie Curie founded the Radium Institute in Paris."}


def doc_triples(service: Service, doc_id: str) -> list[list[str]]:
    resp = service.client.get(f"/admin/kg/documents/{doc_id}/triples", headers=service.admin())
    assert resp.status_code == 200, resp.text
    return [[t["subject"], t["predicate"], t["object"]] for t in resp.json()["triples"]]


def test_supplied_and_extracted_triples_are_visible_after_ingest(service: Service) -> None:
    service.ingest(CURIE)
    triples = doc_triples(service, "curie")
    assert ["Marie Curie", "won", "Nobel Prize in Physics"] in triples
    assert ["Marie Curie", "discover", "polonium"] in triples
    assert ["Marie Curie", "born in", "Warsaw"] in triples
    resp = service.client.get("/admin/kg/documents/nope/triples", headers=service.admin())
    assert resp.status_code == 404


def test_invalid_triples_are_rejected_naming_document_and_triple(service: Service) -> None:
    service.ingest(PARIS)
    edges = service.runtime.graph.edge_count
    for triples, needle in (
        ([["a", "b"]], "triple 0"),
        ([["a", "b", "c"], ["a", "  ", "c"]], "triple 1: predicate is empty"),
        ([["a", "b", "x" * 201]], "longer than 200"),
        ([["a", 3, "c"]], "must be a string"),
    ):
        body = {
            "documents": [
                {"id": "good", "text": "fine"},
                {"id": "bad", "text": "x", "triples": triples},
            ]
        }
        resp = service.client.post("/admin/documents", json=body, headers=service.admin())
        assert resp.status_code == 422, triples
        detail = str(resp.json()["detail"])
        assert "document 'bad'" in detail and needle in detail, detail
    assert service.runtime.kb.document_ids() == ["paris"]
    assert service.runtime.graph.edge_count == edges


def test_update_and_delete_keep_the_graph_consistent(service: Service) -> None:
    service.ingest(CURIE, PARIS)
    service.ingest({**CURIE, "text": "Marie Curie discovered radium.", "triples": []})
    triples = doc_triples(service, "curie")
    assert ["Marie Curie", "discover", "radium"] in triples
    assert not any(t[2] in {"polonium", "Warsaw", "Nobel Prize in Physics"} for t in triples)

    resp = service.client.delete("/admin/documents/curie", headers=service.admin())
    assert resp.status_code == 200
    graph = service.runtime.graph
    assert graph.triples_for_document("curie") == []
    # the entity both documents mention stays, with the other document's edge
    entities = service.client.get(
        "/admin/kg/entities", params={"q": "curie"}, headers=service.admin()
    ).json()
    assert [e["name"] for e in entities["entities"]] == ["Marie Curie"]
    assert "radium" not in [e.key for e in graph.search_entities("radium")]


def test_chat_injects_at_most_three_triples_deterministically(service: Service) -> None:
    service.ingest(CURIE, PARIS)
    question = "What did Marie Curie discover?"
    body = service.chat(question)
    assert 1 <= len(body["triples"]) <= 3
    assert ["Marie Curie", "discover", "polonium"] in body["triples"]
    assert body["triples"] == sorted(body["triples"])
    again = service.chat(question)
    assert again["triples"] == body["triples"]
    view = service.client.get(
        "/admin/kg/subgraph", params={"question": question}, headers=service.admin()
    ).json()
    assert [[t["subject"], t["predicate"], t["object"]] for t in view["triples"]] == body["triples"]
    assert all(isinstance(t["score"], float) for t in view["triples"])
    # and they are in the prompt that was sent, in the constraints block
    runtime = service.runtime
    retrieval = runtime.retriever.retrieve(question, 3)
    system = runtime.builder.build(question, retrieval.passages, retrieval.triples).messages[0][
        "content"
    ]
    block = system[system.index("Domain constraints") :]
    for s, p, o in body["triples"]:
        assert f"({s}; {p}; {o})" in block


def test_graph_survives_restart(start_service: ServiceFactory) -> None:
    first = start_service()
    first.ingest(CURIE)
    before = doc_triples(first, "curie")
    first.stop()
    second = start_service()
    assert doc_triples(second, "curie") == before


def test_sample_kb_relation_questions_get_the_right_triple(start_service: ServiceFactory) -> None:
    service = start_service(seed_sample_kb=True)
    expected = {
        "Where was Marie Curie born?": ["Marie Curie", "born in", "Warsaw"],
        "Who created Python?": ["Guido van Rossum", "create", "Python"],
        "Who designed the Analytical Engine?": ["Charles Babbage", "design", "Analytical Engine"],
        "Which company sponsored Rust?": ["Mozilla", "sponsor", "development of Rust"],
    }
    for question, triple in expected.items():
        view = service.client.get(
            "/admin/kg/subgraph", params={"question": question}, headers=service.admin()
        ).json()
        got = [[t["subject"], t["predicate"], t["object"]] for t in view["triples"]]
        assert triple in got, (question, got)


def test_extraction_can_be_switched_off(start_service: ServiceFactory) -> None:
    service = start_service(kg_extraction=False)
    service.ingest(CURIE)
    assert doc_triples(service, "curie") == [["Marie Curie", "won", "Nobel Prize in Physics"]]
