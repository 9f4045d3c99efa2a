"""Readers for the Dockerfile and the Makefile's install recipe, as the deploy tests need
them: the Dockerfile's stages with what each inherits (ENV, USER, VOLUME, ...), and the
``pip`` commands of an install as comparable steps.

Only the Dockerfile syntax warmrag's Dockerfile uses is read: line continuations,
comments, ``ARG`` before the first ``FROM``, ``FROM image AS name``, and the
instructions below with JSON or plain arguments.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
MAKEFILE = REPO / "Makefile"


@dataclass
class Stage:
    name: str
    base: str  # an image, or the name of an earlier stage
    instructions: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"no stage {name!r} in the Dockerfile")

    def chain(self, name: str) -> list[Stage]:
        """The stage and every stage it is built FROM, the first one first."""
        names = {s.name for s in self.stages}
        chain = [self.stage(name)]
        while chain[0].base in names:
            chain.insert(0, self.stage(chain[0].base))
        return chain

    def instructions(self, name: str, keyword: str) -> list[str]:
        """The arguments of every ``keyword`` instruction a stage runs or inherits."""
        return [args for s in self.chain(name) for kw, args in s.instructions if kw == keyword]

    def env(self, name: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for args in self.instructions(name, "ENV"):
            env.update(parse_env(args))
        return env

    def user(self, name: str) -> str | None:
        users = self.instructions(name, "USER")
        return users[-1].strip() if users else None

    def volumes(self, name: str) -> list[str]:
        return [v for args in self.instructions(name, "VOLUME") for v in json_or_words(args)]

    def exposed(self, name: str) -> list[str]:
        return [p for args in self.instructions(name, "EXPOSE") for p in args.split()]

    def cmd(self, name: str) -> list[str] | None:
        cmds = self.instructions(name, "CMD")
        return json_or_words(cmds[-1]) if cmds else None

    def arg_default(self, name: str, arg: str) -> str | None:
        for args in self.instructions(name, "ARG"):
            key, _, value = args.strip().partition("=")
            if key == arg:
                return value
        return None

    def venv_source(self, name: str) -> str:
        """The stage whose /opt/venv a final stage copies."""
        for args in self.instructions(name, "COPY"):
            words = args.split()
            source = [w.removeprefix("--from=") for w in words if w.startswith("--from=")]
            if source and words[-1] == "/opt/venv":
                return source[0]
        raise KeyError(f"stage {name!r} copies no /opt/venv")

    def pip_steps(self, name: str) -> list[PipStep]:
        """The pip commands that built the venv a final stage ships, in order."""
        steps: list[PipStep] = []
        for run in self.instructions(self.venv_source(name), "RUN"):
            steps.extend(pip_steps(run))
        return steps


def parse_dockerfile(text: str) -> Dockerfile:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name, expand(words[0], global_args)))
        elif not stages:
            if keyword == "ARG":
                key, _, value = args.partition("=")
                global_args[key] = value
        else:
            stages[-1].instructions.append((keyword, args))
    return Dockerfile(global_args, stages)


def expand(word: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), word)


def parse_env(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # the old form: ENV KEY value with spaces
        return {words[0]: " ".join(words[1:])}
    return dict(word.split("=", 1) for word in words)


def json_or_words(args: str) -> list[str]:
    if args.startswith("["):
        value = json.loads(args)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return args.split()


@dataclass(frozen=True)
class PipStep:
    """One ``pip install`` or ``pip uninstall``, without what does not change what gets
    installed (``--quiet``, ``--yes``, ``--no-compile``, where torch comes from, editable
    or not)."""

    action: str
    flags: frozenset[str]
    targets: tuple[str, ...]  # requirement specifiers, ``-r FILE`` and ``.``
    index_url: str | None = None

    def __str__(self) -> str:
        return " ".join(["pip", self.action, *sorted(self.flags), *self.targets])


_IGNORED = {"--quiet", "-q", "--yes", "-y", "--no-compile"}
_FLAGS = {"--no-deps", "--no-build-isolation", "--upgrade", "-U"}


def pip_steps(command: str) -> list[PipStep]:
    """Each ``python -m pip install|uninstall ...`` or ``uv pip install ...`` in a shell
    command line (uv's ``--python`` names the venv, not what it installs)."""
    steps = []
    for part in re.split(r"&&|;", command):
        words = shlex.split(part)
        if "pip" not in words:
            continue
        words = words[words.index("pip") + 1 :]
        if "||" in words:
            words = words[: words.index("||")]
        words = [w for w in words if not re.match(r"^\d?>", w)]  # redirections
        action, rest = words[0], words[1:]
        flags: set[str] = set()
        targets: list[str] = []
        index_url = None
        i = 0
        while i < len(rest):
            word = rest[i]
            if word in ("-r", "--requirement"):
                targets.append(f"-r {rest[i + 1]}")
                i += 1
            elif word == "--index-url":
                index_url = rest[i + 1]
                i += 1
            elif word == "--python":
                i += 1
            elif word in ("-e", "--editable"):
                pass  # the image installs warmrag itself, the Makefile an editable link
            elif word in _FLAGS:
                flags.add("--upgrade" if word == "-U" else word)
            elif word not in _IGNORED:
                targets.append(word)
            i += 1
        steps.append(PipStep(action, frozenset(flags), tuple(targets), index_url))
    return steps


def makefile_install_steps(text: str) -> list[PipStep]:
    """The pip steps of the Makefile's ``$(STAMP)`` recipe (what ``make install`` runs)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$(STAMP):"))
    steps: list[PipStep] = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        if re.search(r"(-m|\$\(UV\)) pip ", line):
            steps.extend(pip_steps(line.replace("$(PY)", "python")))
    return steps
