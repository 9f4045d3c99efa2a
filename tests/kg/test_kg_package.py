"""The ``kg`` package's names load on first use, so its light modules stay light."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import kg


def test_every_exported_name_resolves() -> None:
    """Each name is the very object its module defines (not a stand-in or a stale copy)."""
    assert sorted(kg.__all__) == sorted(kg._EXPORTS)
    for name in kg.__all__:
        defined = getattr(importlib.import_module(kg._EXPORTS[name]), name)
        assert getattr(kg, name) is defined, name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = kg.nothing


def test_the_models_do_not_load_spacy() -> None:
    """The API's request models (and so the CLI) import ``kg.models``; spaCy takes
    seconds to import and only extraction needs it."""
    code = "import sys, kg.models, api.schemas; print('spacy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
