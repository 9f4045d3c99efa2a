"""``WordPieces`` splits text as the model's transformers tokenizer does: chunk sizes, and
with them chunks, prompts and their prefixes, must not move when the service stops
importing transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sentence_transformers import SentenceTransformer

from rag.knowledge.embedding import EMBEDDING_WINDOW, bundled_model_path
from rag.knowledge.readers import read_document
from rag.knowledge.word_pieces import WordPieces

PAGES = Path(__file__).resolve().parents[2] / "data" / "git-doc"
#: Text the pages lack: Chinese (the seed documents' language), accents, symbols, nothing.
OTHERS = [
    "预热的前缀保存在 vLLM 的 KV 缓存中，文档变化时只重新预热检索结果改变的前缀。",
    "naïve café, Ünïcödé and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢; a\u200bzero-width space",
    "",
    " \t\n",
    "rebase " * 400,
]


def texts() -> list[str]:
    files = sorted(PAGES.iterdir())
    pages = [read_document(path.name, path.read_bytes()).text for path in files]
    pages += [path.read_text() for path in files]  # the HTML's and Markdown's own text
    pieces = [p for page in pages for p in page.split("\n\n") if p.strip()]
    lines = [line for page in pages for line in page.splitlines() if line.strip()]
    return pages + pieces + lines + OTHERS


@pytest.fixture(scope="module")
def reference() -> Any:
    return SentenceTransformer(str(bundled_model_path()), device="cpu").tokenizer


def test_the_ids_are_transformers(reference: Any) -> None:
    pieces = WordPieces(bundled_model_path(), EMBEDDING_WINDOW)
    every = texts()
    assert len(every) > 500
    for text in every:
        assert pieces.ids(text) == reference.encode(text, add_special_tokens=True), text[:80]


def test_the_windows_are_transformers(reference: Any) -> None:
    """Cut to the window with the special tokens kept, never padded (the file asks for
    both at 128)."""
    pieces = WordPieces(bundled_model_path(), EMBEDDING_WINDOW)
    every = texts()
    expected = reference(
        every, truncation=True, max_length=EMBEDDING_WINDOW, return_token_type_ids=True
    )
    windows = pieces.windows(every)
    assert max(len(w.ids) for w in windows) == EMBEDDING_WINDOW
    for i, window in enumerate(windows):
        assert window.ids == expected["input_ids"][i], every[i][:80]
        assert window.attention_mask == expected["attention_mask"][i]
        assert window.type_ids == expected["token_type_ids"][i]
