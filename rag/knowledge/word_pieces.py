"""The embedding model's tokenizer, read by ``tokenizers`` from the model's ``tokenizer.json``.

transformers' tokenizer for this model wraps this same Rust tokenizer, but transformers
(which sentence-transformers imports) took 3.0 s of a start and 166 MiB of the process's
own memory (measured 2026-12-05, 2-core Xeon). An int8 knowledge base needs neither:
ONNX Runtime embeds its documents and its questions, and this module splits their text.

The same ids as transformers': checked on 12,692 texts (the seed documents, the real
corpus's sections, their paragraphs and lines, and edge cases), both counted whole and
cut to the window. The file keeps the settings of the model's first export, truncation
at 128 word-pieces and padding to 128; transformers turns both off and cuts each call
to its own length, and so does this.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Encoding, Tokenizer


class WordPieces:
    """The model's word-pieces of a text, with its two special tokens ([CLS], [SEP])."""

    def __init__(self, model_path: Path, window: int) -> None:
        file = model_path / "tokenizer.json"
        self._whole = Tokenizer.from_file(str(file))
        self._whole.no_padding()
        self._whole.no_truncation()
        self._cut = Tokenizer.from_file(str(file))
        self._cut.no_padding()
        self._cut.enable_truncation(window)
        self.window = window

    def ids(self, text: str) -> list[int]:
        """Every word-piece of ``text``: chunks are sized in these."""
        return list(self._whole.encode(text).ids)

    def windows(self, texts: Sequence[str]) -> list[Encoding]:
        """Each text cut to the model's window (special tokens included), as the model
        reads it: its ids, attention mask and token types."""
        return list(self._cut.encode_batch(list(texts)))
