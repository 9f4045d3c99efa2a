"""The Grafana dashboard and the monitoring profile agree with what is exported: every
query names a metric that warmrag or vLLM exports, every panel uses the provisioned
Prometheus, and Prometheus scrapes the services the Compose file runs.

warmrag's names come from the app's own registry (built, not started); vLLM's from the
/metrics texts of vLLM 0.32 that ``rag/llm/server_metrics.py``'s tests read. Each check lists
what is wrong, and runs on the real files and on copies broken on purpose.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from api.config import Settings
from api.main import create_app
from tests.deploy.compose_checks import COMPOSE

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "warmrag.json"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
VLLM_TEXTS = sorted((ROOT / "tests" / "rag" / "llm" / "data").glob("vllm_metrics_*.txt"))
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")
#: PromQL words that are not metric names (functions are told by the "(" after them).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "offset", "bool", "inf", "nan"}  # fmt: skip


def exported(text: str) -> set[str]:
    """Metric names in a Prometheus text: its families' and its samples' names."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("data")))
    # The HTTP instrumentation creates its metrics when Starlette builds the middleware
    # stack (at the first request); build it here, without serving.
    app.build_middleware_stack()
    names = exported(generate_latest(app.state.metrics.registry).decode())
    for path in VLLM_TEXTS:
        names |= exported(path.read_text())
    return names


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)  # matchers, ranges, strings
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", expr)  # label lists
    names = set()
    for match in re.finditer(r"(?<![A-Za-z0-9_.:])[A-Za-z_:][A-Za-z0-9_:]*", expr):
        word = match.group()
        if word.lower() in KEYWORDS or expr[match.end() :].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def _known(name: str, known: set[str]) -> bool:
    """A labelled metric never observed exports only its family's name (a counter's
    without ``_total``): a query's ``x_total`` or ``x_bucket`` matches family ``x``."""
    return name in known or any(name.removesuffix(s) in known for s in SUFFIXES)


def query_problems(dashboard: dict[str, Any], known: set[str]) -> list[str]:
    problems = []
    for panel in panels(dashboard):
        targets = panel.get("targets", [])
        if panel.get("type") != "row" and not targets:
            problems.append(f"panel {panel.get('title')!r} has no query")
        for target in targets:
            expr = target.get("expr", "")
            names = metric_names(expr)
            if not names:
                problems.append(f"panel {panel.get('title')!r}: {expr!r} reads no metric")
            for name in sorted(n for n in names if not _known(n, known)):
                problems.append(f"panel {panel.get('title')!r}: {name} is not exported")
    return problems


def datasource_problems(dashboard: dict[str, Any], datasources: dict[str, Any]) -> list[str]:
    uids = {d["uid"] for d in datasources["datasources"] if d["type"] == "prometheus"}
    problems = []
    for panel in panels(dashboard):
        for node in (panel, *panel.get("targets", [])):
            source = node.get("datasource") or {}
            if source.get("uid") not in uids:
                problems.append(f"panel {panel.get('title')!r} uses data source {source!r}")
    return problems


def scrape_problems(prometheus: dict[str, Any], compose: dict[str, Any]) -> list[str]:
    """Prometheus scrapes every warmrag service and vLLM replica, and only services the
    Compose file has, on the ports they listen on."""
    services = compose["services"]
    targets = {
        t
        for job in prometheus["scrape_configs"]
        for group in job.get("static_configs", [])
        for t in group["targets"]
    }
    problems = [f"{t}: no such service" for t in sorted(targets) if t.split(":")[0] not in services]
    for name in services:
        if name.startswith(("warmrag", "vllm-")) and f"{name}:8000" not in targets:
            problems.append(f"{name} is not scraped")
    return problems


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def test_every_query_reads_an_exported_metric(dashboard: dict[str, Any], known: set[str]) -> None:
    assert VLLM_TEXTS, "vLLM's metric texts are missing"
    assert query_problems(dashboard, known) == []
    titles = " ".join(p["title"] for p in panels(dashboard)).lower()
    for subject in ("warm", "cold", "slo", "cold starts", "re-warms", "kv cache", "budget"):
        assert subject in titles, subject

    broken = copy.deepcopy(dashboard)
    broken["panels"][0]["targets"][0]["expr"] = "rate(warmrag_no_such_metric_total[5m])"
    broken["panels"][1]["targets"][0]["expr"] = "vector(1)"
    assert query_problems(broken, known) == [
        f"panel {broken['panels'][0]['title']!r}: warmrag_no_such_metric_total is not exported",
        f"panel {broken['panels'][1]['title']!r}: 'vector(1)' reads no metric",
    ]


def test_panels_use_the_provisioned_prometheus(dashboard: dict[str, Any]) -> None:
    datasources = yaml.safe_load(DATASOURCES.read_text())
    assert datasource_problems(dashboard, datasources) == []
    broken = copy.deepcopy(dashboard)
    broken["panels"][2]["datasource"] = {"type": "prometheus", "uid": "elsewhere"}
    assert len(datasource_problems(broken, datasources)) == 1


def test_prometheus_scrapes_the_compose_services() -> None:
    prometheus = yaml.safe_load(PROMETHEUS.read_text())
    compose = yaml.safe_load(COMPOSE.read_text())
    assert scrape_problems(prometheus, compose) == []
    broken = copy.deepcopy(prometheus)
    broken["scrape_configs"][1]["static_configs"][0]["targets"] = ["vllm-0:8000", "vllm-9:8000"]
    assert scrape_problems(broken, compose) == [
        "vllm-9:8000: no such service",
        "vllm-1 is not scraped",
    ]


def test_metric_names_reads_promql() -> None:
    expr = (
        "histogram_quantile(0.5, sum by (le, warm) (rate(warmrag_first_token_latency_seconds_bucket"
        '{warm="true"}[5m]))) / on (instance) vllm:kv_cache_usage_perc offset 5m'
    )
    assert metric_names(expr) == {
        "warmrag_first_token_latency_seconds_bucket",
        "vllm:kv_cache_usage_perc",
    }
