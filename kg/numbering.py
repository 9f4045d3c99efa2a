"""The dtype of the graph's index arrays: node and edge numbers, vector rows, chunk ids
and the positions that order them.

int32, not numpy's default int64. At 1,000,000 chunks (2.1 million entities, 3.2 million
edges) the snapshot (``kg.index``) holds a dozen such arrays of millions of items, and
each change copies them: it builds the next snapshot beside the one chats still read.
Every number here stays far below 2**31 (a row of a vector matrix, an edge of the graph).
"""

from __future__ import annotations

import numpy as np

INDEX = np.int32
