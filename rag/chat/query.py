"""What a question is reduced to, in one place: the two normalizations of its text.

- ``retrieval_text``: what is embedded and searched. Whitespace collapsed and trailing
  ``?!.`` dropped, nothing else: the embedding model is uncased and reads the rest
  ("C++", "what's") as meaning.
- ``normalize_query``: the key the warm registry counts a question under. Stricter —
  case-folded, every punctuation mark removed — so that spellings of one question are
  counted as one hot query (the cold-start design measured a 12% hit rate from un-normalized keys).

Every spelling that shares a key must also retrieve the same context, or a warm prefix
would serve only some of them: each difference ``normalize_query`` ignores is one the
embedding model ignores too, once ``retrieval_text`` has run (tests/rag/chat/test_retriever.py).
"""

from __future__ import annotations

import re
import unicodedata

_SPACE = re.compile(r"\s+")
_NON_WORD = re.compile(r"[^\w\s]+", re.UNICODE)
_TRAILING_MARKS = re.compile(r"[\s?!.。？！]+$")


def retrieval_text(question: str) -> str:
    """The text a question is embedded with: NFKC, single-spaced, without trailing ``?!.``
    ("  What is X ?? " → "What is X"); a question of nothing but marks is kept."""
    text = _SPACE.sub(" ", unicodedata.normalize("NFKC", question)).strip()
    return _TRAILING_MARKS.sub("", text) or text


def normalize_query(question: str) -> str:
    """The registry key: NFKC, case-folded, punctuation-free, single-spaced
    ("What  is X?" → "what is x")."""
    text = unicodedata.normalize("NFKC", question).casefold()
    text = _NON_WORD.sub(" ", text)
    return _SPACE.sub(" ", text).strip()
