"""Knowledge-aware warmup: keep the prefixes users are about to send warm in vLLM.

- ``settings``: ``WarmupSettings`` (``WARMRAG_WARMUP_*``).
- ``keys``: normalized query keys (case, whitespace, punctuation).
- ``store``: SQLite persistence of the query log and the registry.
- ``registry``: the query log and the warm entries in memory, kept in step with the store.
- ``heat``: decayed counts, the order every decision follows.
- ``budget``: how many prefix tokens may be kept warm (a share of vLLM's KV cache).
- ``context``: the prefix a stored query retrieves now (``retrieval_memo``: remembered).
- ``planner``: which prefixes to warm within the budget, in progressive steps.
- ``warmer``: sends prefills to vLLM with bounded concurrency, yielding to chats, and
  keeps the registry in step with them.
- ``detector``: after a knowledge-base change, which entries changed context.
- ``changes``: debounce, detection and refresh after knowledge-base changes.
- ``hot``: hot and seed queries' contexts, planned and warmed.
- ``restore``: start-up restore, evicted re-warms, the TTL sweep.
- ``jobs``: the one priority queue and worker every job runs through.
- ``reports``: what each cycle did.
- ``service``: the coordinator; the chat engine's observer.
- ``scheduler``: APScheduler jobs that drive detection, TTL sweeps and hot warmup.
"""
