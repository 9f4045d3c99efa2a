"""A stand-in for vLLM's OpenAI server, run as a real child process by fault tests.

It speaks the parts of the protocol warmrag uses (``/health``, ``/metrics``,
streaming and non-streaming ``/v1/chat/completions`` with usage) and misbehaves on
request: ``POST /fault {"mode": ...}`` switches the next chats to

- ``ok``: a normal answer;
- ``malformed``: a ``data:`` line that is not JSON;
- ``error_chunk``: an OpenAI ``error`` object mid-stream;
- ``die_mid_stream``: two tokens, then the process exits (a crash mid-answer);
- ``hang``: headers, one token, then nothing, forever.

While the file named by ``FAKE_VLLM_HOLD_FILE`` exists, a starting process waits
before it serves (a restart test looks at the service in the meantime).

vLLM itself cannot be made to do any of these on purpose; the supervisor and the
client's parsing are tested against this process over real HTTP instead.

Run: ``python tests/fake_vllm_server.py --port P``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

BLOCK = 16
METRICS = (
    f'vllm:cache_config_info{{block_size="{BLOCK}",enable_prefix_caching="True",'
    'kv_cache_memory_bytes="4294967296",num_gpu_blocks="4096"} 1.0\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="fake"} 0.01\n'
)
state: dict[str, Any] = {"mode": "ok", "chats": 0, "prefills": 0}
seen: set[str] = set()


def _usage(body: dict[str, Any]) -> dict[str, Any]:
    """One token per word; a prompt seen before has its full blocks cached (enough
    prefix caching for warmrag's start-up probe)."""
    messages = body.get("messages", [])
    words = sum(len(str(m.get("content", "")).split()) for m in messages)
    key = json.dumps(messages, sort_keys=True)
    cached = words // BLOCK * BLOCK if key in seen else 0
    seen.add(key)
    return {
        "prompt_tokens": words,
        "completion_tokens": 1,
        "total_tokens": words + 1,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _chunk(text: str) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + "\n\n"


async def _stream(body: dict[str, Any]) -> AsyncIterator[str]:
    mode = state["mode"]
    yield _chunk("Hello")
    if mode == "malformed":
        yield "data: {this is not json\n\n"
        return
    if mode == "error_chunk":
        yield 'data: {"error": {"message": "engine failed", "code": 500}}\n\n'
        return
    yield _chunk(" there")
    if mode == "die_mid_stream":
        await asyncio.sleep(0.05)
        os._exit(1)
    if mode == "hang":
        await asyncio.sleep(3600)
    yield "data: " + json.dumps({"choices": [], "usage": _usage(body)}) + "\n\n"
    yield "data: [DONE]\n\n"


async def chat(request: Request) -> Response:
    body = await request.json()
    if body.get("stream"):
        state["chats"] += 1
        if state["mode"] == "malformed_first":
            return StreamingResponse(iter(["data: nope\n\n"]), media_type="text/event-stream")
        return StreamingResponse(_stream(body), media_type="text/event-stream")
    state["prefills"] += 1
    return JSONResponse(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "."}}],
         "usage": _usage(body)}
    )  # fmt: skip


async def fault(request: Request) -> Response:
    state["mode"] = (await request.json())["mode"]
    return JSONResponse(state)


async def stats(request: Request) -> Response:
    return JSONResponse({**state, "pid": os.getpid()})


async def health(request: Request) -> Response:
    return PlainTextResponse("")


async def metrics(request: Request) -> Response:
    return PlainTextResponse(METRICS)


app = Starlette(
    routes=[
        Route("/health", health),
        Route("/metrics", metrics),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/fault", fault, methods=["POST"]),
        Route("/stats", stats),
    ]
)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # A restart test holds the new process here, to look at the service meanwhile.
    hold = os.environ.get("FAKE_VLLM_HOLD_FILE")
    while hold and os.path.exists(hold):
        time.sleep(0.05)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
