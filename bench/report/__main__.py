"""``python -m bench.report bench/results/<run>/results.json``: rewrite that run's
report, results and plots next to the given results.json, printing each path written."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.report import read_results, write_report

source = Path(sys.argv[1])
for written in write_report(read_results(source), source.parent):
    print(written)
