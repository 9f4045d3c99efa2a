"""Knowledge-aware warmup: keep the prefixes users are about to send warm in vLLM.

- ``keys``: normalized query keys (case, whitespace, punctuation).
- ``store``: the persisted query log and registry of warm prefixes (SQLite).
- ``budget``: how many prefix tokens may be kept warm (a share of vLLM's KV cache).
- ``planner``: which prefixes to warm within the budget, in progressive steps.
- ``warmer``: sends prefills to vLLM with bounded concurrency, yielding to chats.
- ``detector``: after a knowledge-base change, which entries changed context.
- ``service``: ties them together; the chat engine's observer; start-up restore.
- ``scheduler``: APScheduler jobs that drive detection, TTL sweeps and hot warmup.
"""
