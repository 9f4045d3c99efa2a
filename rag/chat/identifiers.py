"""Exact identifiers in a question, and a rerank that puts passages naming them first.

Users of technical documentation type the names they are stuck on: ``PRAGMA
foreign_keys``, ``core.autocrlf``, ``git merge --no-ff``. A sentence embedding blurs
``foreign_keys`` into its neighbours ``foreign_key_check`` and ``defer_foreign_keys``;
an exact-token test does not. ``identifiers`` finds the names in a question by a fixed
rule (below); ``promote`` moves the candidates that define or mention them, as whole
tokens, ahead of the rest, keeping the dense order otherwise.

Measured by ``bench.identifier_probe`` over dense's top 50 on Git's documentation
(docs/performance.md): on 40 questions naming an option or a config key, recall@1 0.175
-> 0.700 and MRR 0.364 -> 0.739 (one document per section), 0.350 -> 0.825 and 0.536
-> 0.850 (Markdown pages); the 245 heading questions keep their ranks exactly. Hyphenated
command names (``git-rm``, ``git cherry-pick``) are identifiers only on request
(``commands``): counted, they broke 5 of the heading questions within the top 3 on
sections and 4 on pages, fixing 1 (all about ``git format-patch``: every chunk that
mentions the command outranked the gold section, whose text does not repeat it).

An identifier is, in the question:

- a backticked span: ```git log -p``` (its content);
- a token with ``_`` in it: ``foreign_keys``, ``GIT_DIR``;
- a token with ``.`` between a letter and a letter: ``core.autocrlf``, ``config.worktree``
  (not ``e.g.`` or ``2.0``);
- a call: ``sqlite3_open()``, ``open()``;
- a long option: ``--no-ff``, ``--file=x`` (``--file``);
- with ``commands`` only, a hyphenated command name: ``git-rm``, or the hyphenated word
  after ``git`` (``git cherry-pick``: ``cherry-pick``);
- with ``capitals`` only, an all-capitals word of two letters or more: ``PRAGMA``,
  ``HEAD``, ``HTTP``. Off by default: the questions warmup predicts from a page's
  headings carry its man-page section names (``git-tag(1): SYNOPSIS``), and with the rule
  on, every chunk of any page that says ``SYNOPSIS`` was promoted into their contexts
  (a real-pages warmup test saw them all turn into cross-page contexts). None of the
  measured gains came from it: the options and config keys are found by the rules above.

A candidate contains an identifier when the identifier occurs in it as a whole token:
not inside a longer name (``foreign_keys`` is not in ``defer_foreign_keys``, ``--ff`` not
in ``--ff-only``, ``core.eol`` not in ``core.eolx``). All-capitals identifiers match
case-sensitively (``HEAD`` is not the word "head"), the others ignoring case (config keys
and SQL names are case-insensitive).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

_BACKTICKED = re.compile(r"`([^`\n]+)`")
#: Candidate tokens: a long option, or a run of name characters (a trailing ``()`` kept).
_TOKEN = re.compile(r"--[A-Za-z0-9][\w.\-]*|[\w$][\w.\-$/]*(?:\(\))?")
_UNDERSCORE = re.compile(r"[A-Za-z0-9]_|_[A-Za-z0-9]")
_DOTTED = re.compile(r"[A-Za-z_]\.[A-Za-z_]")
_COMMAND = re.compile(r"git-[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_HYPHENATED = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+")
_CAPITALS = re.compile(r"[A-Z][A-Z0-9_]*[A-Z0-9]")
_NOT_NAMES = frozenset({"e.g", "i.e", "etc", "vs"})
#: Before and after an identifier in a text: not a name character (a ``.`` that ends a
#: sentence is fine, a ``.`` that continues a dotted name is not).
_BEFORE = r"(?<![\w.\-$])"
_AFTER = r"(?![\w\-]|\.\w)"


def _is_identifier(token: str, previous: str, commands: bool, capitals: bool) -> bool:
    letters = sum(c.isalpha() for c in token)
    if token.startswith("--") or token.endswith("()"):
        return True
    if _UNDERSCORE.search(token):
        return True
    if _DOTTED.search(token) and token.lower() not in _NOT_NAMES:
        return True
    if commands and (
        _COMMAND.fullmatch(token) or (previous == "git" and _HYPHENATED.fullmatch(token))
    ):
        return True
    return capitals and letters >= 2 and _CAPITALS.fullmatch(token) is not None


def identifiers(question: str, commands: bool = False, capitals: bool = False) -> tuple[str, ...]:
    """The identifiers ``question`` names, in order, each once (see the module's rule);
    hyphenated command names (``git-rm``, ``git cherry-pick``) only with ``commands``,
    all-capitals words (``PRAGMA``, ``HEAD``) only with ``capitals``."""
    found: list[str] = [m.group(1).strip() for m in _BACKTICKED.finditer(question)]
    rest = _BACKTICKED.sub(" ", question)
    previous = ""
    for match in _TOKEN.finditer(rest):
        token = match.group(0).rstrip(".-/")
        if token.startswith("--"):
            token = token.split("=", 1)[0]
        if token and _is_identifier(token, previous, commands, capitals):
            found.append(token)
        previous = token.lower()
    return tuple(dict.fromkeys(t for t in found if t))


def _name(identifier: str) -> str:
    return re.escape(identifier.removesuffix("()"))


def _flags(identifier: str) -> int:
    exact = not any(c.islower() for c in identifier)  # HEAD, GIT_DIR: case-sensitive
    return 0 if exact else re.IGNORECASE


def _mention(identifier: str) -> re.Pattern[str]:
    after = r"\s*\(" if identifier.endswith("()") else _AFTER
    return re.compile(_BEFORE + _name(identifier) + after, _flags(identifier))


def _definition(identifier: str) -> re.Pattern[str]:
    """A line that starts with the identifier, after markup and at most one word:
    ``--abort:: Abort ...``, ``PRAGMA foreign_keys;``, ``## core.eol``."""
    after = r"\s*\(" if identifier.endswith("()") else _AFTER
    lead = r"^[ \t#*>`]*(?:[^\s:]+[ \t]+)?"
    return re.compile(lead + _BEFORE + _name(identifier) + after, _flags(identifier) | re.M)


@dataclass(frozen=True)
class IdentifierMatcher:
    """The identifiers of one question, compiled once, tested against many texts."""

    names: tuple[str, ...]
    mentions: tuple[re.Pattern[str], ...]
    definitions: tuple[re.Pattern[str], ...]

    @classmethod
    def of(cls, question: str, commands: bool = False, capitals: bool = False) -> IdentifierMatcher:
        names = identifiers(question, commands, capitals)
        return cls(names, tuple(_mention(n) for n in names), tuple(_definition(n) for n in names))

    def __bool__(self) -> bool:
        return bool(self.names)

    def count(self, text: str) -> int:
        """How many of the identifiers ``text`` contains as whole tokens."""
        return sum(1 for p in self.mentions if p.search(text))

    def points(self, text: str, label: str = "") -> int:
        """2 for each identifier ``text`` defines (a line starts with it) or ``label``
        (a title, a heading path) names, 1 for each it only mentions."""
        total = 0
        for mention, definition in zip(self.mentions, self.definitions, strict=True):
            if definition.search(text) or (label and mention.search(label)):
                total += 2
            elif mention.search(text):
                total += 1
        return total


def promote(
    candidates: Sequence[T],
    matcher: IdentifierMatcher,
    text_of: Callable[[T], str],
    define: bool = True,
) -> list[T]:
    """``candidates`` (best first) reordered: those that define or mention more of the
    question's identifiers first (``IdentifierMatcher.points``; with ``define`` off, a
    plain count of the identifiers each contains), the dense order kept among equals (a
    stable sort), so a question without identifiers, or candidates that all score alike,
    keep their order."""
    if not matcher:
        return list(candidates)
    score = matcher.points if define else matcher.count
    scores = [score(text_of(c)) for c in candidates]
    order = sorted(range(len(candidates)), key=lambda i: -scores[i])
    return [candidates[i] for i in order]
