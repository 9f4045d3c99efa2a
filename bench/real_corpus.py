"""A real benchmark corpus: Git's own documentation (the Debian package ``git-doc``),
cut into one document per section, with one rule-made question per section whose
heading reads as one (its gold answer is that section).

The synthetic towns of ``bench.workload`` retrieve perfectly by construction; this
corpus has long, overlapping, code-heavy sections, so it measures retrieval quality
as well as latency. It is built at benchmark time from the installed package and
never committed. ``RealWorkload`` offers what ``bench.scenarios`` uses of
``bench.workload.Workload``; ``python -m bench.real_corpus --out DIR`` writes
``corpus.jsonl`` and ``questions.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from bench.apt import AptInstallError, apt_install
from bench.asciidoc import parse_sections, question_for
from bench.real_records import CorpusFacts, RealSpec, WordsPerSection
from bench.retrieval_quality import GoldQuestion
from bench.workload import TopicStreams, request_streams
from rag.chat.query import normalize_query
from rag.knowledge.input_checks import doc_id_problem

PACKAGE = "git-doc"
DOC_ROOT = Path("/usr/share/doc/git/html")
#: The user manual first, then the guides, then the most used commands' man pages.
GUIDES = (
    "user-manual", "gittutorial", "gittutorial-2", "gitcore-tutorial", "gitworkflows",
    "giteveryday", "gitfaq", "gitcli", "gitignore", "gitsubmodules", "gitcredentials",
)  # fmt: skip
COMMANDS = (
    "commit", "branch", "merge", "rebase", "log", "reset", "checkout", "switch", "restore",
    "stash", "remote", "fetch", "pull", "push", "tag", "clone", "bisect", "cherry-pick",
    "diff", "add", "status", "config", "init", "rm", "mv", "show", "revert", "blame", "grep",
    "reflog", "worktree", "submodule", "clean", "format-patch", "am",
)  # fmt: skip
MIN_SECTION_WORDS = 40
#: Longer sections (a command's OPTIONS) keep their first blocks up to this many words.
MAX_SECTION_WORDS = 1200
GOLD_TEXT_WORDS = 60


def ensure_package(root: Path = DOC_ROOT) -> None:
    """Install ``git-doc`` when its sources are missing (the benchmark runs as root)."""
    if (root / "user-manual.txt").exists():
        return
    try:
        apt_install(PACKAGE)
    except AptInstallError as exc:
        raise RuntimeError(
            f"the real corpus needs the Debian package {PACKAGE!r} ({root}/user-manual.txt is "
            f"missing) and {exc}"
        ) from exc
    if not (root / "user-manual.txt").exists():
        raise RuntimeError(f"{PACKAGE} is installed but {root}/user-manual.txt is still missing")


@dataclass(frozen=True)
class GitSection:
    """One section of Git's documentation: a corpus document, and a benchmark topic
    (``bench.workload.Topic``) with at most one question."""

    id: str
    path: tuple[str, ...]  # the heading path: page title, then each heading to this one
    source: str  # the file name, "user-manual.txt"
    body: str
    gold_text: str  # the body's first prose paragraph, at most GOLD_TEXT_WORDS words
    question: str | None
    words: int  # of the body before it was capped
    #: The same kept blocks as Markdown (code fenced), for ``bench.chunking_quality``'s pages.
    markdown: str = ""

    @property
    def slug(self) -> str:
        return self.id

    @property
    def name(self) -> str:
        return " > ".join(self.path)

    def questions(self) -> list[str]:
        return [self.question] if self.question else []

    def documents(self, revision: int = 0) -> list[dict[str, object]]:
        """The section as one document; a ``revision`` > 0 edits its heading line and
        appends a sentence, so that the change re-ingests and re-embeds it."""
        heading, body = self.name, self.body
        if revision:
            heading += f" (edition {revision + 1})"
            body += f"\n\nThis section was revised in edition {revision + 1}."
        metadata = {"title": self.path[-1], "source": self.source}
        return [{"id": self.id, "text": f"{heading}\n\n{body}", "metadata": metadata}]

    def gold(self) -> GoldQuestion | None:
        if self.question is None:
            return None
        return GoldQuestion(self.question, self.id, self.gold_text)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def sections_from_source(text: str, source: str) -> list[GitSection]:
    """The kept sections of one AsciiDoc source: at least ``MIN_SECTION_WORDS`` words,
    capped at ``MAX_SECTION_WORDS`` (whole blocks), each with a unique, valid id."""
    stem = source.removesuffix(".txt")
    command = stem.replace("-", " ", 1) if stem.startswith("git-") else None
    kept: list[GitSection] = []
    slugs: Counter[str] = Counter()
    for parsed in parse_sections(text):
        if parsed.words < MIN_SECTION_WORDS:
            continue
        blocks: list[str] = []
        marked: list[str] = []
        total = 0
        for block in parsed.blocks:
            if blocks and total + block.words > MAX_SECTION_WORDS:
                break
            blocks.append(block.text if block.words <= MAX_SECTION_WORDS else _cap(block.text))
            marked.append(f"```\n{blocks[-1]}\n```" if block.kind == "code" else blocks[-1])
            total += block.words
        prose = next((b for b in parsed.blocks if b.kind == "prose"), parsed.blocks[0])
        slug = _slug(parsed.heading)
        slugs[slug] += 1
        doc_id = f"git-doc/{stem}/{slug}" + (f"-{slugs[slug]}" if slugs[slug] > 1 else "")
        if problem := doc_id_problem(doc_id):
            raise ValueError(f"section id {doc_id!r} {problem}")
        kept.append(
            GitSection(
                id=doc_id,
                path=parsed.path,
                source=source,
                body="\n\n".join(blocks),
                gold_text=_cap(prose.text, GOLD_TEXT_WORDS),
                question=question_for(parsed.heading, command),
                words=parsed.words,
                markdown="\n\n".join(marked),
            )
        )
    return kept


def _cap(text: str, words: int = MAX_SECTION_WORDS) -> str:
    return " ".join(text.split()[:words])


def load_sections(root: Path = DOC_ROOT) -> list[GitSection]:
    """Every kept section of the chosen sources, in a fixed order; a question asked by
    an earlier section already ("How do I merge?") is dropped from later ones, so each
    question key has exactly one gold section."""
    ensure_package(root)
    names = [*(f"{g}.txt" for g in GUIDES), *(f"git-{c}.txt" for c in COMMANDS)]
    sections = [s for name in names for s in sections_from_source((root / name).read_text(), name)]
    return unique_questions(sections)


def unique_questions(sections: list[GitSection]) -> list[GitSection]:
    seen: set[str] = set()
    result = []
    for section in sections:
        key = normalize_query(section.question or "")
        if section.question and key in seen:
            section = replace(section, question=None)
        seen.add(key)
        result.append(section)
    return result


@dataclass
class RealWorkload(TopicStreams[GitSection]):
    """Corpus, questions and request streams of one run over Git's documentation: a
    seeded choice of ``spec.sections`` sections (``towns``, in corpus order), of which
    ``spec.question_sections`` with a question are asked, Zipf with paraphrases.

    ``sections`` replaces the installed documentation (tests pass parsed fixtures)."""

    spec: RealSpec
    sections: list[GitSection] | None = None

    def __post_init__(self) -> None:
        spec = self.spec
        available = self.sections if self.sections is not None else load_sections()
        order = {s.id: i for i, s in enumerate(available)}
        shuffled = list(available)
        random.Random(spec.seed).shuffle(shuffled)
        chosen = shuffled[: spec.sections]
        asked = [s for s in chosen if s.question][: spec.question_sections]
        if len(chosen) < spec.sections or len(asked) < spec.question_sections:
            raise ValueError(
                f"{len(available)} sections ({len(asked)} with a question among the chosen) "
                f"cannot give {spec.sections} sections with {spec.question_sections} asked"
            )
        self.towns = sorted(chosen, key=lambda s: order[s.id])
        self.question_towns = sorted(asked, key=lambda s: order[s.id])
        self.steady, self.restart = request_streams(self.questions, spec)

    def gold_questions(self, only_asked: bool = False) -> list[GoldQuestion]:
        """Each question of the corpus with its gold section (the asked ones alone when
        ``only_asked``): what ``bench.retrieval_quality`` scores."""
        chosen = self.question_towns if only_asked else self.towns
        return [g for t in chosen if (g := t.gold()) is not None]


def describe(workload: RealWorkload) -> CorpusFacts:
    """Counts and sizes of a workload's corpus, for the builder's output and reports."""
    words = [len(str(d["text"]).split()) for d in workload.documents()]
    return CorpusFacts(
        sections=len(words),
        words=sum(words),
        words_per_section=WordsPerSection(
            median=statistics.median(words),
            p90=sorted(words)[int(0.9 * (len(words) - 1))],
            max=max(words),
        ),
        capped_sections=sum(1 for t in workload.towns if t.words > MAX_SECTION_WORDS),
        questions=len(workload.gold_questions()),
        asked_questions=len(workload.questions),
        sources=len({t.source for t in workload.towns}),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the two files")
    parser.add_argument("--quick", action="store_true", help="the quick spec's sizes")
    parser.add_argument("--sections", type=int, help="corpus size (sections)")
    parser.add_argument("--asked", type=int, help="sections whose questions are asked")
    args = parser.parse_args(argv)
    spec = RealSpec.quick() if args.quick else RealSpec.full()
    spec = replace(
        spec,
        sections=args.sections or spec.sections,
        question_sections=args.asked or spec.question_sections,
    )
    workload = RealWorkload(spec)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "corpus.jsonl").open("w") as out:
        for doc in workload.documents():
            out.write(json.dumps(doc, ensure_ascii=False) + "\n")
    asked = {normalize_query(q) for q in workload.questions}
    with (args.out / "questions.jsonl").open("w") as out:
        for gold in workload.gold_questions():
            row = {**gold.__dict__, "asked": normalize_query(gold.question) in asked}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(json.dumps(describe(workload).to_json(), indent=2))


if __name__ == "__main__":
    main()
