"""``python -m bench``: the benchmark suite (see ``bench/suite.py``)."""

from bench.suite import main

main()
