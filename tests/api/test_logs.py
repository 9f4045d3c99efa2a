"""Log lines an operator reads: text on a terminal, JSON anywhere else, and no scheduler
chatter at INFO."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from api.logs import QUIET_LOGGERS, LogFormat, configure_logging, resolve_format


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def root_logging() -> Iterator[None]:
    """``configure_logging`` replaces the root handlers: put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in quiet.items():
        logging.getLogger(name).setLevel(was)


@pytest.mark.usefixtures("root_logging")
def test_a_terminal_gets_text_and_a_pipe_gets_json() -> None:
    terminal, pipe = Terminal(), io.StringIO()
    assert configure_logging(None, terminal) is LogFormat.TEXT
    logging.getLogger("warmrag.test").info("ready in %d s", 12)
    line = terminal.getvalue().strip()
    assert line.endswith("INFO warmrag.test [-]: ready in 12 s") and not line.startswith("{")

    assert configure_logging(None, pipe) is LogFormat.JSON
    logging.getLogger("warmrag.test").info("ready in %d s", 12)
    record = json.loads(pipe.getvalue())
    assert record["message"] == "ready in 12 s" and record["level"] == "INFO"
    assert record["logger"] == "warmrag.test" and record["request_id"] == "-"


@pytest.mark.usefixtures("root_logging")
def test_a_chosen_format_wins_over_the_terminal() -> None:
    terminal = Terminal()
    assert configure_logging(LogFormat.JSON, terminal) is LogFormat.JSON
    logging.getLogger("warmrag.test").info("hello")
    assert json.loads(terminal.getvalue())["message"] == "hello"
    assert resolve_format(LogFormat.TEXT, io.StringIO()) is LogFormat.TEXT


@pytest.mark.usefixtures("root_logging")
def test_the_scheduler_logs_warnings_only() -> None:
    pipe = io.StringIO()
    configure_logging(LogFormat.JSON, pipe)
    scheduler = logging.getLogger("apscheduler.executors.default")
    scheduler.info('Running job "warm cycle" (scheduled at 12:00)')
    scheduler.warning("Run time of job was missed by 0:00:05")
    lines = [json.loads(line)["message"] for line in pipe.getvalue().splitlines()]
    assert lines == ["Run time of job was missed by 0:00:05"]


def test_progress_bars_are_off_where_the_log_is_json() -> None:
    from api.logs import quiet_progress_bars

    env: dict[str, str] = {}
    assert quiet_progress_bars(env, io.StringIO()) and env["TQDM_DISABLE"] == "1"
    env = {}
    assert not quiet_progress_bars(env, Terminal()) and "TQDM_DISABLE" not in env
    env = {"WARMRAG_LOG_FORMAT": "json"}
    assert quiet_progress_bars(env, Terminal()) and env["TQDM_DISABLE"] == "1"
    env = {"WARMRAG_LOG_FORMAT": "Text"}
    assert not quiet_progress_bars(env, io.StringIO()) and "TQDM_DISABLE" not in env
    env = {"TQDM_DISABLE": "0"}  # an operator's own choice stays
    assert quiet_progress_bars(env, io.StringIO()) and env["TQDM_DISABLE"] == "0"


@pytest.mark.usefixtures("root_logging")
def test_requests_to_vllm_are_not_logged_one_by_one() -> None:
    pipe = io.StringIO()
    configure_logging(LogFormat.JSON, pipe)
    logging.getLogger("httpx").info('HTTP Request: POST http://127.0.0.1:8001/tokenize "200 OK"')
    assert pipe.getvalue() == ""


@pytest.mark.usefixtures("root_logging")
def test_a_warm_cycle_is_one_readable_line_and_a_json_object() -> None:
    from rag.llm.client import Usage
    from warmup.models import RewarmReason
    from warmup.reports import CycleKind, ReportLog

    reports = ReportLog(clock=lambda: 1000.0, kb_version=lambda: 3)
    pipe = io.StringIO()
    configure_logging(LogFormat.JSON, pipe)
    report = reports.begin(CycleKind.KB_CHANGE)
    report.entries_checked = 8
    report.count_prefill(Usage(prompt_tokens=1300, cached_tokens=100), RewarmReason.KB_CHANGE)
    reports.finish(report)
    record = json.loads(pipe.getvalue().splitlines()[0])
    assert record["message"].startswith(
        "warmup kb_change: checked 8, warmed 1 (1,200 prefill tokens), extended 0, retired 0"
    )
    assert record["warmup"]["kind"] == "kb_change" and record["warmup"]["kb_version"] == 3

    terminal = Terminal()
    configure_logging(None, terminal)
    reports.finish(reports.begin(CycleKind.KB_CHANGE))  # did nothing: no line
    report = reports.begin(CycleKind.RESTORE)
    report.count_prefill(Usage(prompt_tokens=700, cached_tokens=0), RewarmReason.KB_CHANGE)
    reports.finish(report)
    (line,) = terminal.getvalue().splitlines()
    assert "warmup restore: checked 0, warmed 1 (700 prefill tokens)" in line
    assert "{" not in line
