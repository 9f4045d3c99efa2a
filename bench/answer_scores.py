"""Judge-free scores of one answer against its question's gold paragraph
(``bench.model_compare`` uses them).

*Holds the gold fact*: the answer and the gold paragraph share a run of at least
``GOLD_RUN`` consecutive content words (case-folded, punctuation stripped, the
``STOPWORDS`` dropped, a plural or verb ending cut by ``stem``: "limits" and "limit" are
one word, which a first version without it missed in a right answer), and that run is
not made only of the question's own words. Why this rule: the gold paragraph is the
section's first prose paragraph, which states what the question asks; an answer that
says it reuses some of its wording. Four content words in a row almost never match by
chance (single terms such as "git commit" or "working tree" are two or three), while a
paraphrase of a whole sentence is missed: the rule undercounts right answers rather than
crediting wrong ones, and it does so equally for every model. Runs built only from the
question's words are not credited, since a model that echoes the question would
otherwise score. The same rule with runs of ``LOOSE_RUN`` words is reported beside it,
as a check on the threshold.

*Echoes the instruction*: the answer shares a run of ``ECHO_RUN`` words with the
prompt's instruction (``rag.chat.prompt.INSTRUCTION``): a model that continues the
prompt instead of answering it writes the instruction back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag.chat.prompt import INSTRUCTION

GOLD_RUN = 4
#: The looser rule reported beside it, to show how much the threshold decides.
LOOSE_RUN = 3
ECHO_RUN = 8

_WORD = re.compile(r"[a-z0-9]+(?:['_-][a-z0-9]+)*")

#: Function words, and words every answer about the corpus uses ("git").
_STOPWORD_TEXT = """a about above after again against all also am an and any are as at be
    because been before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers him his how i if in into is
    it its itself just me more most my no nor not now of off on once only or other our
    ours out over own same she should so some such than that the their theirs them then
    there these they this those through to too under until up very was we were what when
    where which while who whom why will with would you your yours git use used using
    one may might must shall"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def words(text: str) -> list[str]:
    """The text's words, case-folded, punctuation stripped."""
    return _WORD.findall(text.casefold())


def stem(word: str) -> str:
    """The word less one common inflection (-ing, -ed, -es, -s), where a stem of at least
    four letters remains: enough to match "limits" with "limit", "lines" with "line"."""
    for ending in ("ing", "ed", "es", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 4 and not word.endswith("ss"):
            return word[: -len(ending)]
    return word


def content_words(text: str) -> list[str]:
    return [stem(w) for w in words(text) if w not in STOPWORDS]


def _runs(items: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(items[i : i + n]) for i in range(len(items) - n + 1)}


def gold_runs(answer: str, gold: str, question: str, n: int = GOLD_RUN) -> list[str]:
    """The runs of ``n`` content words the answer shares with the gold paragraph, less
    those made only of the question's words."""
    asked = set(content_words(question))
    shared = _runs(content_words(answer), n) & _runs(content_words(gold), n)
    return sorted(" ".join(run) for run in shared if not set(run) <= asked)


def holds_gold_fact(answer: str, gold: str, question: str) -> bool:
    return bool(gold_runs(answer, gold, question))


def echoes_instruction(answer: str, instruction: str = INSTRUCTION) -> bool:
    return bool(_runs(words(answer), ECHO_RUN) & _runs(words(instruction), ECHO_RUN))
