"""Log lines of the service: JSON objects (one per line, for a log collector) or text for
a terminal, each with the id of the request it belongs to (``-`` outside a request), the
id that the response's ``X-Request-ID`` header carries. uvicorn's lines and the vLLM
child's output (logger ``vllm``) go through the same handler.
"""

from __future__ import annotations

import logging
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


def configure_logging(fmt: LogFormat) -> None:
    """Route the root logger (and everything that propagates to it) through one handler."""
    logging.basicConfig(level=logging.INFO, handlers=[log_handler(fmt)], force=True)
