"""Questions that name an identifier, made from the real corpus, and the pragma case.

``bench.identifier_probe`` needs questions whose answer hinges on an exact name. The
real corpus's own questions come from headings and name few (``git cherry-pick``,
``HTTP``), so more are made by rule from the same 300 sections (``bench.real_corpus``):

- **options**: every long option that a section's definition list names as a term
  (a paragraph starting ``--abort:: ...`` or ``--overwrite-ignore:: --no-overwrite-ignore::
  ...``; ``--file=<file>`` counts as ``--file``), kept when exactly one section's list
  names it; the question is "What does git <command> <option> do?" (the command from the
  page, ``git-merge.txt``), "What does <option> do?" on a guide's page;
- **config keys**: every ``section.key`` of a Git configuration section (``core``,
  ``push``, ``status``, ...: ``CONFIG_SECTIONS``; no ``<name>`` or ``*`` placeholders) that
  occurs, as an exact token, in exactly one section of the corpus; the question is "What
  does <key> do?" and the gold is that one section (the included ``config/*.txt`` files
  are not expanded by the corpus, so a key's one mention is where the corpus documents it).

From each pool a seeded sample is kept (``OPTION_QUESTIONS`` and ``KEY_QUESTIONS``, at
most ``PER_SECTION`` per gold section so that no one option list dominates).

The pragma case (``tests/data/sqlite-pragmas``) is six short documents, one per SQLite
pragma, four of them about foreign keys, and the question a user asked of SQLite's
documentation: "What does PRAGMA foreign_keys do?", and the same without ``PRAGMA``.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from bench.paths import REPO
from bench.real_corpus import GitSection
from bench.retrieval_quality import GoldQuestion
from rag.chat.identifiers import IdentifierMatcher, identifiers
from rag.knowledge.models import DocumentIn

SEED = 15
OPTION_QUESTIONS = 25
KEY_QUESTIONS = 15
PER_SECTION = 2
#: Git's configuration sections whose keys the corpus's prose names.
CONFIG_SECTIONS = frozenset(
    {
        "advice", "branch", "color", "commit", "core", "credential", "diff", "fetch", "format",
        "gc", "grep", "http", "i18n", "init", "log", "merge", "pull", "push", "rebase",
        "receive", "remote", "stash", "status", "submodule", "tag", "user", "worktree",
    }
)  # fmt: skip
_LABELS = re.compile(r"^((?:\S[^\n]*?::\s+)+)")
_LABEL = re.compile(r"(\S[^\n]*?)::\s+")
_KEY = re.compile(r"(?<![\w./$\-])([a-z][a-zA-Z0-9]*(?:\.[a-zA-Z][a-zA-Z0-9]*)+)(?![\w/<*\-])")

PRAGMA_DIR = REPO / "tests" / "data" / "sqlite-pragmas"
#: The user's question, and the same without the keyword (dense then ranks
#: ``foreign_key_list`` first).
PRAGMA_QUESTIONS = ("What does PRAGMA foreign_keys do?", "What does foreign_keys do?")
PRAGMA_GOLD = "sqlite/foreign_keys"


def defined_options(section: GitSection) -> list[tuple[str, str]]:
    """(option, paragraph) for each long option the section's definition list names."""
    found = []
    for paragraph in section.body.split("\n\n"):
        labels = _LABELS.match(paragraph)
        if labels is None:
            continue
        for label in _LABEL.findall(labels.group(1)):
            head = re.split(r"[\s=\[]", label, maxsplit=1)[0]
            if head.startswith("--") and identifiers(head) == (head,):
                found.append((head, paragraph))
    return found


def _command(section: GitSection) -> str | None:
    stem = section.source.removesuffix(".txt")
    return stem.replace("-", " ", 1) if stem.startswith("git-") else None


def option_pool(sections: Sequence[GitSection]) -> list[GoldQuestion]:
    """One question per long option that exactly one section's definition list names."""
    where: dict[str, set[str]] = defaultdict(set)
    first: dict[str, tuple[GitSection, str]] = {}
    for section in sections:
        for option, paragraph in defined_options(section):
            where[option].add(section.id)
            first.setdefault(option, (section, paragraph))
    pool = []
    for option, (section, paragraph) in first.items():
        if len(where[option]) != 1:
            continue
        command = _command(section)
        asked = f"What does {command} {option} do?" if command else f"What does {option} do?"
        pool.append(GoldQuestion(asked, section.id, paragraph))
    return pool


def key_pool(sections: Sequence[GitSection]) -> list[GoldQuestion]:
    """One question per configuration key that occurs in exactly one section."""
    keys = {
        k
        for s in sections
        for k in _KEY.findall(s.body)
        if k.split(".")[0] in CONFIG_SECTIONS and len(k.rsplit(".", 1)[1]) > 1
    }
    pool = []
    for key in sorted(keys):
        matcher = IdentifierMatcher.of(f"What does {key} do?")
        if matcher.names != (key,):
            continue
        holders = [s for s in sections if matcher.count(s.body)]
        if len(holders) == 1:
            pool.append(GoldQuestion(f"What does {key} do?", holders[0].id, holders[0].gold_text))
    return pool


def _sample(pool: Sequence[GoldQuestion], n: int, rng: random.Random) -> list[GoldQuestion]:
    shuffled = list(pool)
    rng.shuffle(shuffled)
    kept: list[GoldQuestion] = []
    per: dict[str, int] = defaultdict(int)
    for gold in shuffled:
        if len(kept) < n and per[gold.gold] < PER_SECTION:
            kept.append(gold)
            per[gold.gold] += 1
    return kept


def identifier_questions(sections: Sequence[GitSection]) -> list[GoldQuestion]:
    """The seeded sample of option and config-key questions (see the module's rule)."""
    rng = random.Random(SEED)
    options = _sample(option_pool(sections), OPTION_QUESTIONS, rng)
    return options + _sample(key_pool(sections), KEY_QUESTIONS, rng)


def pragma_documents(folder: Path = PRAGMA_DIR) -> list[DocumentIn]:
    """The pragma fixture: one document per file, its first line as the title."""
    documents = []
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text()
        title = text.split("\n", 1)[0].strip()
        documents.append(DocumentIn(id=f"sqlite/{path.stem}", text=text, metadata={"title": title}))
    return documents
