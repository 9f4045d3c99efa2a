"""AsciiDoc sources (Git's documentation) into plain-text sections, and each section's
heading into the question a user would ask about it.

The benchmark's real corpus (``bench.real_corpus``) is built from these: one document
per section, one question per section whose heading reads as a question, with that
section as its gold answer. The parser knows only what Git's ``*.txt`` sources use:
``== Title`` headings and underlined ones (``-``, ``~``, ``^``, ``+`` under the
title), delimited blocks, block attributes, anchors, ``include::`` lines and inline
markup such as ``linkgit:git-add[1]``. The output is deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

#: Underline characters by heading level (``=`` is the document title).
_UNDERLINE_LEVEL = {"=": 0, "-": 1, "~": 2, "^": 3, "+": 4}
_ONE_LINE_HEADING = re.compile(r"^(={1,5})\s+(\S.*?)\s*=*\s*$")
_UNDERLINE = re.compile(r"^([=\-~^+])\1+$")
#: Listing and literal blocks: content kept verbatim as code.
_VERBATIM = re.compile(r"^(-{4,}|\.{4,}|\+{4,})$")
#: Example, sidebar, quote and open blocks: their content is ordinary text.
_TRANSPARENT = re.compile(r"^(={4,}|\*{4,}|_{4,}|--)$")
_COMMENT_BLOCK = re.compile(r"^/{4,}$")
_DROPPED_LINE = re.compile(
    r"^(\[\[[^\]]*\]\]|\[[^\]]*\]|:[\w-]+:.*|include::.*|(ifdef|ifndef|endif|ifeval)::.*|//.*|\+)$"
)
_LIST_ITEM = re.compile(r"^(\d+\.|[*.-]+|[a-z]\.)\s|::\s*$|::\s|^\S.*;;$")
_INLINE: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r"linkgit:([\w.-]+)\[(\d)\]"), r"\1(\2)"),
    (re.compile(r"(?:link:|https?://)[^\s\[]*\[([^\]]+)\]"), r"\1"),
    (re.compile(r"<<[^,>]+,\s*([^>]+)>>"), r"\1"),
    (re.compile(r"<<(?:def_)?([^>]+)>>"), lambda m: re.sub(r"[-_]", " ", m.group(1))),
    (re.compile(r"\[\[[^\]]*\]\]"), ""),
    (re.compile(r"``([^`']+)''"), r'"\1"'),
    (re.compile(r"`([^`\n]+)`"), r"\1"),
    (re.compile(r"(?<![\w'])'([^'\n]+?)'(?![\w'])"), r"\1"),
    (re.compile(r"(?<![\w*])\*([^*\n]+?)\*(?![\w*])"), r"\1"),
    (re.compile(r"\s\+$"), ""),
]
_ATTRIBUTES = {
    "{litdd}": "--",
    "{caret}": "^",
    "{tilde}": "~",
    "{startsb}": "[",
    "{endsb}": "]",
    "{apostrophe}": "'",
    "{nbsp}": " ",
    "{plus}": "+",
    "{asterisk}": "*",
}


@dataclass(frozen=True)
class Block:
    """A paragraph of a section's body: prose, a list, or code (kept verbatim)."""

    kind: str  # "prose" | "list" | "code"
    text: str

    @property
    def words(self) -> int:
        return len(self.text.split())


@dataclass(frozen=True)
class ParsedSection:
    """One heading and the blocks up to the next heading of any level."""

    path: tuple[str, ...]  # document title, then each heading down to this one
    blocks: tuple[Block, ...]

    @property
    def heading(self) -> str:
        return self.path[-1]

    @property
    def words(self) -> int:
        return sum(b.words for b in self.blocks)


def clean_inline(line: str) -> str:
    """A line of prose without AsciiDoc markup (``linkgit:git-add[1]`` → ``git-add(1)``)."""
    for name, value in _ATTRIBUTES.items():
        line = line.replace(name, value)
    for pattern, repl in _INLINE:
        line = pattern.sub(repl, line)
    return line


def _heading_at(lines: list[str], i: int) -> tuple[int, str, int] | None:
    """(level, title, lines used) when a heading starts at line ``i``, else None."""
    line = lines[i].rstrip()
    if match := _ONE_LINE_HEADING.match(line):
        return len(match.group(1)) - 1, clean_inline(match.group(2)), 1
    if i + 1 >= len(lines) or not line or line[0] in " \t$#-*.=+[/":
        return None
    under = lines[i + 1].rstrip()
    if not _UNDERLINE.match(under) or abs(len(under) - len(line)) > 2 or line.endswith(":"):
        return None
    before = lines[i - 1].strip() if i else ""
    if before and not _DROPPED_LINE.match(before):
        return None  # a listing's closing delimiter right after a line of code
    return _UNDERLINE_LEVEL[under[0]], clean_inline(line), 2


def _blocks(raw: list[tuple[str, list[str]]]) -> tuple[Block, ...]:
    blocks = []
    for kind, lines in raw:
        if kind == "code":
            text = "\n".join(line.rstrip() for line in lines).strip("\n")
        else:
            text = " ".join(clean_inline(line.strip()) for line in lines)
            text = re.sub(r"\s+", " ", text).strip()
            if lines[0][:1] in " \t":
                kind = "code"  # an indented literal paragraph
                text = "\n".join(line.rstrip() for line in lines)
            elif _LIST_ITEM.search(lines[0].strip()):
                kind = "list"
        if text.strip():
            blocks.append(Block(kind, text))
    return tuple(blocks)


def parse_sections(text: str) -> list[ParsedSection]:
    """Every section of an AsciiDoc source at level 1 or deeper, in document order.

    A section's body runs to the next heading of any level, so a chapter keeps only its
    introduction. Text before the first section heading is left out."""
    lines = text.splitlines()
    path: list[str] = []
    sections: list[ParsedSection] = []
    current: tuple[str, ...] | None = None
    raw: list[tuple[str, list[str]]] = []  # (kind, lines) per block
    para: list[str] = []
    delimiter: str | None = None  # the open verbatim or comment block's delimiter

    def end_paragraph() -> None:
        if para:
            raw.append(("prose", list(para)))
            para.clear()

    def end_section() -> None:
        end_paragraph()
        if current is not None:
            sections.append(ParsedSection(current, _blocks(raw)))
        raw.clear()

    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if delimiter is not None:
            if line == delimiter:
                delimiter = None
            elif not _COMMENT_BLOCK.match(delimiter):
                raw[-1][1].append(line)
            continue
        if _VERBATIM.match(line) or _COMMENT_BLOCK.match(line):
            end_paragraph()
            delimiter = line
            if not _COMMENT_BLOCK.match(line):
                raw.append(("code", []))
            continue
        if heading := _heading_at(lines, i - 1):
            level, title, used = heading
            end_section()
            i += used - 1
            path = [*path[:level], *[""] * (level - len(path)), title][: level + 1]
            current = tuple(p for p in path if p) if level >= 1 else None
            continue
        if not line.strip() or _TRANSPARENT.match(line) or _DROPPED_LINE.match(line.strip()):
            if not line.strip() or line.strip() == "+":
                end_paragraph()
            continue
        para.append(line[1:] if re.match(r"^\.\w", line) else line)  # ".Title" lines
    end_section()
    return sections


# Questions ----------------------------------------------------------------------------

#: Headings that name a part of a page, not something a user asks about.
SKIPPED_HEADINGS = frozenset(
    {
        "examples", "example", "see also", "notes", "note", "synopsis", "author", "authors",
        "documentation", "git", "name", "bugs", "reporting bugs", "further reading",
        "discussion", "introduction", "preface", "todo", "description", "overview", "summary",
    }
)  # fmt: skip

_VERBS = {
    "using": "use", "making": "make", "sharing": "share", "creating": "create",
    "examining": "examine", "rebasing": "rebase", "merging": "merge", "resolving": "resolve",
    "naming": "name", "writing": "write", "getting": "get", "setting": "set",
    "running": "run", "putting": "put", "referencing": "reference", "removing": "remove",
    "updating": "update", "moving": "move", "preparing": "prepare", "recovering": "recover",
    "developing": "develop", "configuring": "configure", "exploring": "explore",
    "comparing": "compare", "changing": "change", "choosing": "choose", "ignoring": "ignore",
    "storing": "store", "saving": "save", "publishing": "publish", "producing": "produce",
    "browsing": "browse", "rewriting": "rewrite", "committing": "commit",
    "splitting": "split", "submitting": "submit", "importing": "import", "managing": "manage",
    "generating": "generate", "describing": "describe", "debugging": "debug",
    "reordering": "reorder", "losing": "lose", "telling": "tell", "ensuring": "ensure",
    "dealing": "deal", "editing": "edit", "scripting": "script", "populating": "populate",
    "reviewing": "review", "tagging": "tag", "continuing": "continue", "cloning": "clone",
    "staging": "stage", "checking": "check", "bisecting": "bisect", "branching": "branch",
}  # fmt: skip
_NOT_GERUNDS = frozenset(
    {"string", "nothing", "something", "thing", "everything", "during", "understanding",
     "dangling", "working", "pending", "missing", "existing", "remaining", "following"}
)  # fmt: skip


def _verb(word: str) -> str | None:
    """The plain form of a gerund heading's first word ("Creating" → "create")."""
    lower = word.lower()
    if lower in _VERBS:
        return _VERBS[lower]
    if not lower.endswith("ing") or len(lower) < 6 or lower in _NOT_GERUNDS:
        return None
    stem = lower[:-3]
    if len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "lsfz":
        return stem[:-1]  # "stopping" → "stop"
    needs_e = stem[-1] in "vcz" or re.search(r"(at|ur|us|[^aeiour]l)$", stem)
    return stem + "e" if needs_e else stem


_PROPER = frozenset({"Git", "Linux", "Unix", "Windows", "GitHub", "Perl", "HTTP", "HTTPS", "SSH"})


def _lower_first(text: str) -> str:
    """A heading as the middle of a sentence: Title-case and shouted words in lower case,
    names kept ("The Object Database" → "the object database"; "Git", "HEAD" stay)."""
    if text.isupper():
        return text.lower()

    def word(w: str) -> str:
        core = w.strip(",:;.()\"'")
        title_case = re.fullmatch(r"[A-Z][a-z]+|[A-Z]", core) is not None
        shouted = len(core) >= 6 and core.isupper()
        return w.lower() if (title_case or shouted) and core not in _PROPER else w

    return " ".join(word(w) for w in text.split(" "))


def question_for(heading: str, command: str | None = None) -> str | None:
    """The question a heading answers, by rule; None for a heading that names no topic.

    ``command`` ("git commit") is set for a command's man page: its DESCRIPTION answers
    "What does git commit do?". Elsewhere "How to X" and "Xing Y" become "How do I x Y?"
    and any other heading "What should I know about <heading>?"."""
    title = re.sub(r"\s+", " ", heading).strip().rstrip(".:")
    lower = title.lower()
    if command is not None:
        named = {
            "description": f"What does {command} do?",
            "options": f"Which options does {command} accept?",
            "configuration": f"How can {command} be configured?",
        }
        if lower in named:
            return named[lower]
    if not title or lower in SKIPPED_HEADINGS or lower.startswith("appendix"):
        return None
    if command is not None:
        return f"What should I know about {_lower_first(title)} in {command}?"
    if title.endswith("?"):
        return title.rpartition(": ")[2]  # "Understanding history: What is a branch?"
    if lower.startswith("how to "):
        return f"How do I {_lower_first(title[7:])}?"
    first, _, rest = title.partition(" ")
    if verb := _verb(first):
        words = ["my" if w == "your" else w for w in _lower_first(rest).split(" ")]
        for n in range(1, len(words)):  # "Branching and merging" → "branch and merge"
            if words[n - 1] in ("and", "or") and (other := _verb(words[n])):
                words[n] = other
        return f"How do I {verb} {' '.join(words)}".rstrip() + "?"
    return f"What should I know about {_lower_first(title)}?"
