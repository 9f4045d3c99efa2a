"""Block-aligned prefixes: a warm prefix fills whole KV blocks, so a hit computes only
the question turn.

vLLM reuses only full KV blocks (128 tokens on CPU, 16 on GPU). A prefix whose length
is not a multiple of the block size leaves its last partial block to be recomputed,
with the question, on every hit: measured on an AVX2 host, 512 of 584 prompt tokens
cached, and the 72 recomputed tokens were most of a ~550 ms warm TTFT. The aligner
pads the prefix's system turn, at its end, with ``" ."`` units (one token each in
the byte-level BPE vocabularies checked; the count is verified, never assumed) until
the rendered prefix is a whole number of blocks.

Token counts come from vLLM's own ``/tokenize`` with the chat template applied, so they
are exact for whatever model a deployment serves. Counts are remembered per prefix
text: a prefix is aligned once, and every later render of it is byte-identical. Where
counting fails (vLLM down, no ``/tokenize``) the prefix is left as it is: correct, and
served cold past its last full block.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import httpx

from rag.llm.client import Message
from rag.llm.errors import LLMError
from rag.llm.server_metrics import parse_vllm_metrics

log = logging.getLogger(__name__)

#: What pads: a separate line of " ." units, each one token.
PAD_LEAD = "\n\n"
PAD_UNIT = " ."


class PrefixTokenCounter(Protocol):
    """Tokens of messages rendered with the chat template, without a generation prompt
    (the prefix exactly as it starts the full prompt). None: cannot tell now."""

    def count(self, messages: Sequence[Message]) -> int | None: ...

    def block_size(self) -> int | None:
        """The server's KV block size in tokens; None: cannot tell now."""
        ...


class VLLMTokenCounter:
    """Counts through a vLLM server's ``/tokenize`` (blocking; call from a worker thread)."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s)
        self._absent = False
        self._warned = False
        self._block_size: int | None = None

    def block_size(self) -> int | None:
        """vLLM's KV block size, from its ``/metrics`` (read until it answers, then kept:
        a server's block size does not change while it runs)."""
        if self._block_size is None:
            try:
                response = self._http.get("/metrics")
                response.raise_for_status()
                self._block_size = parse_vllm_metrics(response.text).require_cache().block_size
            except (httpx.HTTPError, LLMError) as exc:
                log.debug("vLLM's block size is not known yet: %s", exc)
        return self._block_size

    def count(self, messages: Sequence[Message]) -> int | None:
        if self._absent:
            return None
        body = {"model": self.model, "messages": list(messages), "add_generation_prompt": False}
        try:
            response = self._http.post("/tokenize", json=body)
            if response.status_code == 404:
                self._absent = True
                log.warning("vLLM at %s has no /tokenize: prefixes stay unaligned", self.base_url)
                return None
            response.raise_for_status()
            return int(response.json()["count"])
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            if not self._warned:
                self._warned = True
                log.warning("counting prefix tokens failed (%s): this prefix is not aligned", exc)
            return None

    def close(self) -> None:
        self._http.close()


class BlockAligner:
    """Pads a prefix to whole KV blocks (see the module doc); thread-safe.

    The block size is the counter's (vLLM's own) unless ``block_size`` fixes it; while
    it is unknown (vLLM not up yet) nothing is padded."""

    def __init__(
        self, counter: PrefixTokenCounter, block_size: int | None = None, max_remembered: int = 8192
    ) -> None:
        self.counter = counter
        self._fixed_block_size = block_size
        self.max_remembered = max_remembered
        self._fits: OrderedDict[str, tuple[int, int | None]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def block_size(self) -> int | None:
        return self._fixed_block_size or self.counter.block_size()

    def align(self, system: str) -> tuple[str, int | None]:
        """The system turn's text padded so that its rendered prefix fills whole blocks,
        and the prefix's tokens (None where not aligned: no block size or no count)."""
        block = self.block_size
        if not block or block <= 1:
            return system, None
        key = hashlib.sha256(f"{block}\x00{system}".encode()).hexdigest()
        with self._lock:
            fit = self._fits.get(key)
        if fit is None:
            fit = self._fit(system, block)
            if fit is None:
                return system, None
            with self._lock:
                self._fits[key] = fit
                while len(self._fits) > self.max_remembered:
                    self._fits.popitem(last=False)
        units, tokens = fit
        return padded(system, units), tokens

    def _fit(self, system: str, block: int) -> tuple[int, int | None] | None:
        """(pad units, prefix tokens) that bring the prefix to a block boundary:
        predicted from one count, then checked; a tokenizer that merges some units gets
        a few corrections. None: the count failed."""
        units = 1
        for _ in range(8):
            tokens = self.counter.count([{"role": "system", "content": padded(system, units)}])
            if tokens is None:
                return None
            short = (-tokens) % block
            if short == 0:
                return units, tokens
            units += short
        log.warning("could not align a prefix to %d-token blocks; it is left as it is", block)
        return 0, None


def padded(system: str, units: int) -> str:
    return system + PAD_LEAD + PAD_UNIT * units if units > 0 else system
