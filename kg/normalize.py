"""Entity-name normalization: one key per entity, whatever document or question names it.

A key is the name lowercased, whitespace collapsed, punctuation and possessive ``'s`` dropped,
leading determiners dropped, and each word reduced to its noun lemma ("Nobel Prizes" ->
"nobel prize"). The same function runs on node names at ingest and on question words at query
time, so it must be cheap and context-free: it uses only spaCy's tokenizer and the lemmatizer's
lookup tables (exceptions, suffix rules, known-noun index), never a parse. A parse would give
better lemmas but costs ~6 ms per question and could lemmatize the same name differently in two
sentences, which would split one entity into two nodes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

from spacy.language import Language

from kg.nlp import load_nlp

LEADING_DETERMINERS = frozenset(
    {
        "the",
        "a",
        "an",
        "this",
        "that",
        "these",
        "those",
        "its",
        "his",
        "her",
        "their",
        "our",
        "my",
        "your",
        "some",
        "any",
        "every",
        "each",
    }
)
_DROPPED_TOKENS = frozenset({"'s", "'", "’s", "’"})
_WHITESPACE = re.compile(r"\s+")


class RuleLemmatizer:
    """Context-free lemmas of one part of speech from the model's rule-lemmatizer tables.

    A word already in the index stays as it is ("physics", "process"); otherwise an
    exception ("children" -> "child", "made" -> "make") or the first suffix rule whose
    result is a known word ("prizes" -> "prize", "headquartered" -> "headquarter");
    otherwise the word unchanged (unlike spaCy, which would guess).
    """

    def __init__(self, nlp: Language, pos: str = "noun") -> None:
        lookups = nlp.get_pipe("lemmatizer").lookups  # type: ignore[attr-defined]
        self._index: frozenset[str] = frozenset(lookups.get_table("lemma_index")[pos])
        self._exceptions: dict[str, list[str]] = dict(lookups.get_table("lemma_exc")[pos])
        self._rules: list[tuple[str, str]] = [
            (old, new) for old, new in lookups.get_table("lemma_rules")[pos]
        ]
        self.lemma = lru_cache(maxsize=65536)(self._lemma)

    def _lemma(self, word: str) -> str:
        if len(word) <= 3 or word in self._index or not word.isalpha():
            return word
        exceptions = self._exceptions.get(word)
        if exceptions:
            return exceptions[0]
        for old, new in self._rules:
            if word.endswith(old):
                form = word[: len(word) - len(old)] + new
                if form in self._index:
                    return form
        return word


class EntityNormalizer:
    """Turns entity names and question text into comparable keys (see module docstring)."""

    def __init__(self, nlp: Language | None = None) -> None:
        self._nlp = nlp if nlp is not None else load_nlp()
        self._tokenizer = self._nlp.tokenizer
        self._lemmatizer = RuleLemmatizer(self._nlp, "noun")
        self._verbs = RuleLemmatizer(self._nlp, "verb")
        self.stop_words: frozenset[str] = frozenset(self._nlp.Defaults.stop_words)

    def words(self, text: str) -> list[str]:
        """The normalized words of ``text`` in order (punctuation and possessives dropped)."""
        text = unicodedata.normalize("NFKC", text)
        out: list[str] = []
        for token in self._tokenizer(text):
            if token.is_punct or token.is_space:
                continue
            lower = token.lower_
            if lower in _DROPPED_TOKENS:
                continue
            out.append(self._lemmatizer.lemma(lower))
        return out

    def stems(self, text: str) -> set[str]:
        """The lowercased words of ``text`` with their noun and verb lemmas ("based" ->
        based, base; "makers" -> maker): what a question and a predicate share when they
        name one relation."""
        out: set[str] = set()
        for token in self._tokenizer(unicodedata.normalize("NFKC", text)):
            if token.is_punct or token.is_space or token.lower_ in _DROPPED_TOKENS:
                continue
            lower = token.lower_
            out.update((lower, self._lemmatizer.lemma(lower), self._verbs.lemma(lower)))
        return out

    def normalize(self, name: str) -> str:
        """The node key of an entity name: "The Nobel Prizes" -> "nobel prize"."""
        words = self.words(name)
        start = 0
        while start < len(words) - 1 and words[start] in LEADING_DETERMINERS:
            start += 1
        key = " ".join(words[start:])
        # A name made only of punctuation still needs some key.
        return key or _WHITESPACE.sub(" ", name).strip().lower()

    def candidate_keys(self, text: str, max_words: int = 6) -> Iterator[str]:
        """Every word n-gram of ``text`` (up to ``max_words``) that could be a node key.

        N-grams that start or end with a stop word ("who", "was marie") are skipped: keys never
        start with a determiner, and such n-grams would mostly link nonsense nodes.
        """
        words = self.words(text)
        stop = self.stop_words
        for start, first in enumerate(words):
            if first in stop or first in LEADING_DETERMINERS:
                continue
            for end in range(start + 1, min(start + max_words, len(words)) + 1):
                if words[end - 1] not in stop:
                    yield " ".join(words[start:end])


_default: EntityNormalizer | None = None


def default_normalizer() -> EntityNormalizer:
    """The process-wide normalizer over the shared spaCy pipeline."""
    global _default
    if _default is None:
        _default = EntityNormalizer()
    return _default


def normalize_entity(name: str) -> str:
    """Shortcut for ``default_normalizer().normalize(name)``."""
    return default_normalizer().normalize(name)


def normalize_predicate(predicate: str) -> str:
    """Predicates compare case- and whitespace-insensitively; words are kept as given."""
    return _WHITESPACE.sub(" ", predicate).strip().lower()
