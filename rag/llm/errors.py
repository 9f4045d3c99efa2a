"""The errors of warmrag's vLLM calls, by what the API answers for each.

They live apart from the client (``rag.llm.client`` re-exports them) so that modules the
client uses, such as the ``/metrics`` reader, can raise them too.
"""

from __future__ import annotations


class LLMError(RuntimeError):
    """Something went wrong on vLLM's side of a request.

    The message is for the log (it may name URLs); ``public`` is what a client sees.
    """

    status_code = 503
    public = "vLLM is unavailable"


class LLMUnavailableError(LLMError):
    """vLLM could not be reached or failed on its side (the API answers 503)."""


class LLMTimeoutError(LLMUnavailableError):
    """vLLM did not finish within the chat's deadline (the API answers 504)."""

    status_code = 504
    public = "vLLM did not answer within the deadline"


class LLMBadResponseError(LLMError):
    """vLLM answered with something that is not a valid OpenAI stream (502)."""

    status_code = 502
    public = "vLLM sent a malformed response"


class LLMRequestError(LLMError):
    """vLLM rejected the request itself, e.g. a prompt longer than the context."""

    status_code = 422
    public = "vLLM rejected the request"
