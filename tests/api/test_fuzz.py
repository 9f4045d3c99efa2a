"""Fuzz every operation of the HTTP API with schemathesis, from the app's own OpenAPI schema.

Stateless: for each operation, a bounded number of requests that fit the schema and of
requests that do not (derandomized, so a run is repeatable and its time bounded). Every
response must be declared for its operation, match its declared schema and media type, and
none may be a 5xx; a request that breaks the schema must be refused with a 4xx.

vLLM is faked (``FakeEngine``): the fuzzer sends a few hundred chats, which would take the
real model minutes on this CPU, while what is under test (validation, routing, error
bodies, response shapes) is the HTTP layer's. Qdrant, the embedder, the graph and the warm
registry are the real ones, so ingests and deletes the fuzzer sends are really done.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import ADMIN_TOKEN, Service
from tests.fakes import FakeEngine

#: Requests per operation and mode: about 400 in all, some 20 s on 2 slow cores.
EXAMPLES = 20
#: What a request that breaks the schema may get (schemathesis' default, and 413).
REJECTIONS = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def test_fuzz_the_http_api(start_fake_service: Callable[..., tuple[Service, FakeEngine]]) -> None:
    service, _ = start_fake_service()
    service.ingest(
        {"id": "guide/zorn.md", "text": "The river Zorn flows through the town of Kellerby."},
        {"id": "curie", "text": "Marie Curie discovered polonium. She was born in Warsaw."},
    )
    # Unknown query parameters and headers are ignored, as HTTP APIs do, so the fuzzer is
    # not asked to add them; it does not forge credentials either (the admin token is sent).
    # A body over the size limit is rightly refused with 413 before it is read.
    config = schemathesis.Config.from_dict(
        {
            "generation": {"allow-extra-parameters": False, "with-security-parameters": False},
            "checks": {"negative_data_rejection": {"expected-statuses": REJECTIONS}},
        }
    )
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json", config=config)
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    operations = [result.ok() for result in schema.get_all_operations() if isinstance(result, Ok)]
    assert len(operations) >= 15
    started = time.monotonic()
    calls = {"n": 0}
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(data=st.data())
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def fuzz(data: st.DataObject) -> None:
                case = data.draw(operation.as_strategy(generation_mode=mode))  # noqa: B023
                calls["n"] += 1
                case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

            try:
                fuzz()
            except Unsatisfiable:
                # Nothing to break: an operation without parameters or body (GET /health).
                assert mode is GenerationMode.NEGATIVE, operation.label
    elapsed = time.monotonic() - started
    print(f"fuzzed {len(operations)} operations with {calls['n']} requests in {elapsed:.1f} s")
