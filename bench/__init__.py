"""warmrag's benchmarks (``make bench``; modules also run alone with ``python -m``).

As the Makefile does for ``make bench``: models load from local paths only, and torch's
compile cache, which importing the model stack creates, goes to the data folder, not /tmp.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "data",
        "cache",
        "torchinductor",
    ),
)
