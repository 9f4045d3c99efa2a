"""Reading a suite's results dict: a section's request records and the floor's median.

The targets, the markdown and the plots all read these, so they live apart from each.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.measure import RequestRecord


def request_records(section: dict[str, Any]) -> list[RequestRecord]:
    return [RequestRecord.from_json(r) for r in section.get("requests", [])]


def floor_p50(results: dict[str, Any]) -> float:
    ttft = results.get("floor", {}).get("ttft_ms", [])
    return statistics.median(ttft) if ttft else math.nan
