"""The process environment the model stack reads when it is imported: the command line
imports this module before anything else of warmrag's.

- Models load from paths inside installed packages, never from a model hub.
- torch creates its compile-cache folder on import, in /tmp unless told otherwise: it
  goes in the data folder, as ``make run`` keeps it.
- Where the log is JSON, tqdm's bars are off: the model loaders write them straight to
  stderr, raw lines among the JSON objects (``api.logs.quiet_progress_bars``).
"""

from __future__ import annotations

import os

from api.logs import quiet_progress_bars

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(
        os.path.abspath(os.environ.get("WARMRAG_DATA_DIR", "data")), "cache", "torchinductor"
    ),
)
quiet_progress_bars(os.environ)
