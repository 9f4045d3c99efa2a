"""Log lines of the service: JSON objects (one per line, for a log collector) or text for
a terminal, each with the id of the request it belongs to (``-`` outside a request), the
id that the response's ``X-Request-ID`` header carries. uvicorn's lines and the vLLM
child's output (logger ``vllm``) go through the same handler.

Unless a format is chosen, stderr decides: text on a terminal (``make run``), JSON
anywhere else (a container, a pipe into a collector). APScheduler logs two INFO lines per
job run, every minute, for as long as the service runs: it logs at WARNING and above.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from enum import StrEnum
from typing import TextIO

from asgi_correlation_id import CorrelationIdFilter
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(correlation_id)s]: %(message)s"
#: Record attributes each JSON line carries, and the keys they are written under.
JSON_FIELDS = {
    "asctime": "time",
    "levelname": "level",
    "name": "logger",
    "correlation_id": "request_id",
    "message": "message",
}


class LogFormat(StrEnum):
    JSON = "json"
    TEXT = "text"


#: Loggers that chatter at INFO about routine work, and the level they log at instead:
#: APScheduler's two lines per job run, and httpx's line per request to vLLM (a dozen
#: per warm cycle; vLLM's own log has them).
QUIET_LOGGERS = {"apscheduler": logging.WARNING, "httpx": logging.WARNING}


def resolve_format(fmt: LogFormat | None, stream: TextIO | None = None) -> LogFormat:
    """``fmt``, or where it is unset, text when ``stream`` (stderr) is a terminal and JSON
    otherwise."""
    if fmt is not None:
        return fmt
    target = stream if stream is not None else sys.stderr
    isatty = getattr(target, "isatty", None)
    return LogFormat.TEXT if callable(isatty) and isatty() else LogFormat.JSON


def quiet_progress_bars(environ: MutableMapping[str, str], stream: TextIO | None = None) -> bool:
    """Turn tqdm's bars off (``TQDM_DISABLE``) where the log is JSON: the model loaders
    write them straight to stderr, raw lines among the JSON objects. tqdm reads the
    variable when it is imported, so this runs first; returns whether it turned them
    off. A value of ``WARMRAG_LOG_FORMAT`` that is no format is left to the settings
    to refuse."""
    try:
        chosen = LogFormat(environ["WARMRAG_LOG_FORMAT"].strip().lower())
    except (KeyError, ValueError):
        chosen = None
    if resolve_format(chosen, stream) is LogFormat.TEXT:
        return False
    environ.setdefault("TQDM_DISABLE", "1")
    return True


def log_handler(fmt: LogFormat, stream: TextIO | None = None) -> logging.Handler:
    """A handler writing ``fmt`` lines to ``stream`` (stderr by default)."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(CorrelationIdFilter(default_value="-"))
    if fmt is LogFormat.JSON:
        handler.setFormatter(
            JsonFormatter(
                list(JSON_FIELDS),
                rename_fields={k: v for k, v in JSON_FIELDS.items() if k != v},
                # uvicorn puts an ANSI-coloured copy of its message in every record.
                reserved_attrs=[*RESERVED_ATTRS, "color_message"],
                json_ensure_ascii=False,
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    return handler


def configure_logging(fmt: LogFormat | None, stream: TextIO | None = None) -> LogFormat:
    """Route the root logger (and everything that propagates to it) through one handler
    on ``stream`` (stderr by default); returns the format chosen (``resolve_format``)."""
    chosen = resolve_format(fmt, stream)
    logging.basicConfig(level=logging.INFO, handlers=[log_handler(chosen, stream)], force=True)
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    return chosen
