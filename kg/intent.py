"""Which relation a question asks for, and which predicates name it.

"Where is the company that makes the Aquila sensor based?" names one entity (the Aquila
sensor) and asks for a relation of another: *based*. A triple whose predicate names that
relation ("Brightfield based in Tamsworth") answers the question once the selection has
reached its subject, even though its text shares little with the question. The intent is
the question's content words as word forms and noun and verb lemmas
(``EntityNormalizer.stems``), less function words and the names of the entities it links
to; a predicate matches when its own stems meet the intent, either directly or through
one of a few groups of words that name the same relation (a question asks where a company
is "based", a document says it is "headquartered in" a city).

Context-free and cheap: the tokenizer and lemma tables only, and each predicate's stems
are computed once per process (graphs hold few distinct predicates).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from kg.normalize import EntityNormalizer

#: Words that name one relation: a question's word from a group matches a predicate with
#: any word of the group. "where" asks for a place, so it joins the place group.
RELATION_GROUPS: tuple[frozenset[str], ...] = (
    frozenset({"where", "base", "headquarter", "headquarters", "hq", "locate", "situate"}),
    frozenset({"found", "founder", "establish", "start", "form", "cofounder", "co-found"}),
    frozenset({"make", "maker", "produce", "producer", "manufacture", "manufacturer", "build"}),
    frozenset({"own", "owner", "acquire", "buy", "parent", "subsidiary"}),
    frozenset({"lead", "leader", "head", "run", "ceo", "chief", "manage", "direct"}),
    frozenset({"bear", "born", "birthplace"}),
)
#: Words that name no relation. spaCy's stop list is not used: it holds "make", "own"
#: and "where", which do.
_FUNCTION_WORDS_TEXT = """a an the this that these those it its they their there here and or
but not no is are was were be been being am do does did has have had will would can could
of in on at by for to from with into onto over under about as than then so who whom whose
which what when why how whatever whoever i you he she we me him her us them my your our
any some all each every one ones also very just only s"""
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())


class RelationIntent:
    """The relation words of one question; ``matches(predicate)`` for each candidate."""

    def __init__(self, normalizer: EntityNormalizer, question: str, entity_words: Iterable[str]):
        self._normalizer = normalizer
        named = set(entity_words)
        words = {
            w
            for w in normalizer.stems(question)
            if w not in FUNCTION_WORDS and w not in named and w.isalpha()
        }
        for group in RELATION_GROUPS:
            if not words.isdisjoint(group):
                words |= group
        self.words = frozenset(words)

    def __bool__(self) -> bool:
        return bool(self.words)

    def matches(self, predicate: str) -> bool:
        return not self.words.isdisjoint(_predicate_stems(self._normalizer, predicate))


@lru_cache(maxsize=16384)
def _predicate_stems(normalizer: EntityNormalizer, predicate: str) -> frozenset[str]:
    return frozenset(w for w in normalizer.stems(predicate) if w not in FUNCTION_WORDS)
