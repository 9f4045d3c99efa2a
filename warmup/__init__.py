"""Knowledge-aware warmup: keep the prefixes users are about to send warm in vLLM.

- ``settings``: ``WarmupSettings`` (``WARMRAG_WARMUP_*``).
- ``service``: the coordinator; the chat engine's observer.
- ``registry``: the query log and the warm entries in memory, where their state lives.
- ``journal``: writes registry changes to the store, in order, off the event loop.
- ``store``: SQLite persistence (queries, entries, pending changes).
- ``heat``: decayed counts, the order every decision follows.
- ``hits``: when a chat is a warm hit.
- ``budget``: how many prefix tokens may be kept warm (a share of vLLM's KV cache).
- ``context``: the prefix a stored query retrieves now (remembered in ``rag.chat.memo``,
  the memo chats read too).
- ``planner``: which prefixes to warm within the budget, in progressive steps.
- ``warmer``: sends prefills to vLLM with bounded concurrency, yielding to chats, and
  keeps the registry in step with them.
- ``detector``: after a knowledge-base change, which entries changed context.
- ``changes``: debounce, detection, refresh; the start-up catch-up.
- ``hot``: hot and seed queries' contexts, planned and warmed.
- ``restore``: start-up restore, evicted re-warms.
- ``sweep``: expired entries, the query log kept bounded.
- ``jobs``: the one priority queue and worker every job runs through.
- ``reports``: what each cycle did.
- ``view``: the typed view of the registry, budget and totals the admin API shows.
- ``metrics``: warmup's Prometheus series.
- ``scheduler``: APScheduler jobs that drive detection, TTL sweeps and hot warmup.

Query keys come from ``rag.chat.query.normalize_query``, computed once per chat by the
chat engine; the change rule is ``rag.chat.change_rule``, shared with the chat's memo.
"""
