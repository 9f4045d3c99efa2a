"""The Dockerfile builds its venvs as ``make install`` does and runs warmrag as `make run`
does, unprivileged, with its state in a volume.

Each property is a function that lists what is wrong with a Dockerfile; each is run on
the real files and on a copy broken on purpose, to show it notices.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from api.config import Settings
from tests.deploy.buildfiles import (
    DOCKERFILE,
    MAKEFILE,
    Dockerfile,
    PipStep,
    makefile_install_steps,
    parse_dockerfile,
)

TARGETS = ("service", "cpu")
CPU_LOCK = "-r requirements-cpu.lock"
TORCH_INDEX_URL = "https://download.pytorch.org/whl/cpu"
UID = "10001"


def _torch(steps: list[PipStep]) -> tuple[int, str] | None:
    for i, step in enumerate(steps):
        for target in step.targets:
            if step.action == "install" and target.startswith("torch"):
                return i, target
    return None


def install_step_problems(make: list[PipStep], docker: list[PipStep], target: str) -> list[str]:
    """The Dockerfile's pip steps for ``target`` are the Makefile's (the ``service``
    target without the cpu lock): torch of one version first, every lock with --no-deps,
    the same packages uninstalled, nothing else."""
    expected = [s for s in make if target == "cpu" or CPU_LOCK not in s.targets]
    where = f"Dockerfile ({target})"
    problems = []
    make_torch, docker_torch = _torch(expected), _torch(docker)
    if docker_torch is None:
        problems.append(f"{where} installs no torch")
    elif make_torch is not None:
        if docker_torch[1] != make_torch[1]:
            problems.append(f"{where} installs {docker_torch[1]}, the Makefile {make_torch[1]}")
        at = [i for i, s in enumerate(docker) if any(t.startswith("-r ") for t in s.targets)]
        if at and min(at) < docker_torch[0]:
            problems.append(f"{where} installs a lock before torch")
    for step in docker:
        locks = [t for t in step.targets if t.startswith("-r ")]
        if locks and "--no-deps" not in step.flags:
            problems.append(f"{where} installs {locks[0][3:]} without --no-deps")
    uninstalled = [s.targets for s in docker if s.action == "uninstall"]
    expected_uninstalled = [s.targets for s in expected if s.action == "uninstall"]
    if uninstalled != expected_uninstalled:
        problems.append(f"{where} uninstalls {uninstalled}, the Makefile {expected_uninstalled}")
    plain = [PipStep(s.action, s.flags, s.targets) for s in docker]  # index_url aside
    if plain != expected:
        problems.append(
            f"{where} runs {[str(s) for s in plain]}, the Makefile {[str(s) for s in expected]}"
        )
    return problems


def torch_index_problems(dockerfile: Dockerfile) -> list[str]:
    """torch comes from the index the TORCH_INDEX_URL build argument names, by default
    the CPU one (nothing pulls a CUDA build)."""
    problems = []
    for target in TARGETS:
        step = next((s for s in dockerfile.pip_steps(target) if s.index_url is not None), None)
        if step is None or _torch([step]) is None or step.index_url != "${TORCH_INDEX_URL}":
            problems.append(f"{target}: torch is not installed from ${{TORCH_INDEX_URL}}")
        default = dockerfile.arg_default(dockerfile.venv_source(target), "TORCH_INDEX_URL")
        if default != TORCH_INDEX_URL:
            problems.append(f"{target}: TORCH_INDEX_URL defaults to {default!r}")
    return problems


def stage_problems(dockerfile: Dockerfile) -> list[str]:
    """Several stages (build tools stay out of the images), both targets, images pinned."""
    problems = []
    if len(dockerfile.stages) < 2:
        problems.append(f"{len(dockerfile.stages)} FROM stage(s), not a multi-stage build")
    names = {s.name for s in dockerfile.stages}
    problems += [f"no {t!r} stage" for t in TARGETS if t not in names]
    for stage in dockerfile.stages:
        if stage.base in names:
            continue
        tag = stage.base.rpartition(":")[2] if ":" in stage.base else ""
        if not tag or tag == "latest" or not stage.base.startswith("python:3.11"):
            problems.append(f"stage {stage.name!r} is FROM {stage.base}, not a pinned 3.11 tag")
    return problems


def runtime_problems(dockerfile: Dockerfile, target: str) -> list[str]:
    """A final image runs ``python -m api serve`` as uid 10001 with the data folder in a
    volume, serving on all interfaces, with nothing fetched from a model hub."""
    problems = []
    user = dockerfile.user(target)
    if user is None or user.split(":")[0] in ("", "0", "root"):
        problems.append(f"{target}: runs as root (USER {user})")
    elif user.split(":")[0] != UID:
        problems.append(f"{target}: USER {user}, not uid {UID}")
    env = dockerfile.env(target)
    data_dir = env.get("WARMRAG_DATA_DIR")
    if data_dir is None:
        problems.append(f"{target}: no WARMRAG_DATA_DIR")
    elif data_dir not in dockerfile.volumes(target):
        problems.append(f"{target}: {data_dir} is not a VOLUME ({dockerfile.volumes(target)})")
    wanted = {
        "WARMRAG_HOST": "0.0.0.0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TORCHINDUCTOR_CACHE_DIR": f"{data_dir}/cache/torchinductor",
    }
    for key, value in wanted.items():
        if env.get(key) != value:
            problems.append(f"{target}: {key}={env.get(key)!r}, not {value!r}")
    port = str(Settings.model_fields["port"].default)
    if port not in dockerfile.exposed(target):
        problems.append(f"{target}: EXPOSE {dockerfile.exposed(target)}, the port is {port}")
    if dockerfile.cmd(target) != ["python", "-m", "api", "serve"]:
        problems.append(f"{target}: CMD {dockerfile.cmd(target)}")
    return problems


@pytest.fixture(scope="module")
def dockerfile_text() -> str:
    return DOCKERFILE.read_text()


@pytest.fixture(scope="module")
def make_steps() -> list[PipStep]:
    return makefile_install_steps(MAKEFILE.read_text())


def test_makefile_recipe_is_read(make_steps: list[PipStep]) -> None:
    """The reference itself: torch first, then uv, both locks, warmrag, and removals."""
    assert [str(s) for s in make_steps] == [
        "pip install --upgrade pip",
        "pip install torch==2.13.0",
        "pip install uv==0.13.8",
        "pip install --no-deps -r requirements.lock",
        "pip install --no-deps -r requirements-cpu.lock",
        "pip install --no-build-isolation --no-deps .",
        "pip uninstall torchvision torchaudio torchcodec triton",
    ]


@pytest.mark.parametrize("target", TARGETS)
def test_install_steps_match_the_makefile(
    dockerfile_text: str, make_steps: list[PipStep], target: str
) -> None:
    docker = parse_dockerfile(dockerfile_text).pip_steps(target)
    assert install_step_problems(make_steps, docker, target) == []


@pytest.mark.parametrize(
    ("old", "new", "target", "problem"),
    [
        ("torch==2.13.0", "torch==2.12.0", "cpu", "installs torch==2.12.0, the Makefile"),
        (
            "install --no-deps -r requirements.lock",
            "install -r requirements.lock",
            "service",
            "installs requirements.lock without --no-deps",
        ),
        (
            "install --no-deps -r requirements-cpu.lock",
            "install -r requirements-cpu.lock",
            "cpu",
            "installs requirements-cpu.lock without --no-deps",
        ),
        ("torchcodec triton", "torchcodec", "service", "uninstalls"),
        ("torchcodec triton", "torchcodec", "cpu", "uninstalls"),
        (
            "RUN uv pip install --no-deps -r requirements-cpu.lock\n",
            "",
            "cpu",
            "the Makefile ['pip install --upgrade pip'",
        ),
    ],
)
def test_install_step_check_notices(
    dockerfile_text: str, make_steps: list[PipStep], old: str, new: str, target: str, problem: str
) -> None:
    assert old in dockerfile_text
    docker = parse_dockerfile(dockerfile_text.replace(old, new)).pip_steps(target)
    problems = install_step_problems(make_steps, docker, target)
    assert any(problem in p for p in problems), problems


def test_install_step_check_notices_locks_before_torch(
    dockerfile_text: str, make_steps: list[PipStep]
) -> None:
    torch = 'RUN python -m pip install --index-url "${TORCH_INDEX_URL}" torch==2.13.0\n'
    lock = "COPY requirements.lock ./\nRUN uv pip install --no-deps -r requirements.lock\n"
    assert torch in dockerfile_text and lock in dockerfile_text
    swapped = dockerfile_text.replace(torch, "").replace(lock, lock + torch)
    problems = install_step_problems(
        make_steps, parse_dockerfile(swapped).pip_steps("service"), "service"
    )
    assert "Dockerfile (service) installs a lock before torch" in problems


def test_torch_comes_from_the_cpu_index(dockerfile_text: str) -> None:
    assert torch_index_problems(parse_dockerfile(dockerfile_text)) == []


def test_torch_index_check_notices(dockerfile_text: str) -> None:
    broken = dockerfile_text.replace(f"TORCH_INDEX_URL={TORCH_INDEX_URL}", "TORCH_INDEX_URL=")
    problems = torch_index_problems(parse_dockerfile(broken))
    assert "cpu: TORCH_INDEX_URL defaults to ''" in problems
    unpinned = dockerfile_text.replace('--index-url "${TORCH_INDEX_URL}" ', "")
    problems = torch_index_problems(parse_dockerfile(unpinned))
    assert "service: torch is not installed from ${TORCH_INDEX_URL}" in problems


def test_stages(dockerfile_text: str) -> None:
    assert stage_problems(parse_dockerfile(dockerfile_text)) == []


def test_stage_check_notices() -> None:
    one_stage = "FROM python:3.11.15-slim-bookworm AS service\nCMD python\n"
    assert "1 FROM stage(s), not a multi-stage build" in stage_problems(parse_dockerfile(one_stage))
    floating = "FROM python:latest AS service\nFROM service AS cpu\n"
    assert stage_problems(parse_dockerfile(floating)) == [
        "stage 'service' is FROM python:latest, not a pinned 3.11 tag"
    ]


@pytest.mark.parametrize("target", TARGETS)
def test_runtime(dockerfile_text: str, target: str) -> None:
    assert runtime_problems(parse_dockerfile(dockerfile_text), target) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("USER 10001:10001", "USER root", "runs as root (USER root)"),
        ("USER 10001:10001", "", "runs as root (USER None)"),
        ("USER 10001:10001", "USER 1000", "USER 1000, not uid 10001"),
        ('VOLUME ["/data"]', 'VOLUME ["/var/lib/warmrag"]', "/data is not a VOLUME"),
        ("HF_HUB_OFFLINE=1", "HF_HUB_OFFLINE=0", "HF_HUB_OFFLINE='0', not '1'"),
        ("WARMRAG_HOST=0.0.0.0", "WARMRAG_HOST=127.0.0.1", "WARMRAG_HOST='127.0.0.1'"),
        ("EXPOSE 8000", "EXPOSE 8080", "EXPOSE ['8080'], the port is 8000"),
        ('"api", "serve"', '"api", "ingest"', "CMD ['python', '-m', 'api', 'ingest']"),
    ],
)
def test_runtime_check_notices(dockerfile_text: str, old: str, new: str, problem: str) -> None:
    assert old in dockerfile_text
    broken = parse_dockerfile(dockerfile_text.replace(old, new))
    for target in TARGETS:
        problems = runtime_problems(broken, target)
        assert any(problem in p for p in problems), (target, problems)


def test_dockerignore_keeps_state_and_venvs_out() -> None:
    ignored = {
        line.strip()
        for line in (Path(DOCKERFILE).parent / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", "data"} <= ignored
    assert not ignored & {"api", "rag", "kg", "durable", "warmup", "README.md", "pyproject.toml"}
