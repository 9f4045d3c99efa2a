"""The checks on input before it enters the retrieval layer: text, document ids, JSON.

Text that warmrag stores or sends to vLLM must be valid Unicode without NUL characters: a
lone surrogate (``"\\ud800"`` in JSON) cannot be encoded as UTF-8 and a NUL ends strings in
C code downstream. ``loads_json`` is the one JSON reader for input (HTTP bodies, ``.jsonl``
files): it refuses NaN and Infinity, numbers out of range, deep nesting, and such text,
naming where the problem is.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import AfterValidator, StringConstraints

MAX_DOC_ID_CHARS = 512
MAX_DOCUMENT_CHARS = 1_000_000
MAX_METADATA_JSON_CHARS = 4_000
MAX_TRIPLES_PER_DOCUMENT = 1_000
#: Deepest nesting of arrays and objects accepted in any JSON input.
MAX_JSON_DEPTH = 32
_INT64 = 2**63

_SURROGATE = re.compile("[\ud800-\udfff]")

Loc = tuple[str | int, ...]


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored or sent as text, or None when it can."""
    if (nul := value.find("\x00")) >= 0:
        return f"contains a NUL character (U+0000) at position {nul}"
    if match := _SURROGATE.search(value):
        return (
            f"contains a lone surrogate U+{ord(match.group()):04X} at position "
            f"{match.start()}: not valid Unicode"
        )
    return None


def _check_text(value: str) -> str:
    if problem := text_problem(value):
        raise ValueError(f"text {problem}")
    return value


#: A ``str`` that ``text_problem`` accepts.
CleanText = Annotated[str, AfterValidator(_check_text)]


def doc_id_problem(doc_id: str) -> str | None:
    """Why ``doc_id`` is not a document id, or None: 1 to ``MAX_DOC_ID_CHARS`` printable
    characters (``str.isprintable``: no control, format, surrogate or unassigned
    characters), without leading or trailing whitespace. Anything else goes: ``/``, ``#``,
    ``?``, ``%``, spaces inside, any script."""
    if not doc_id:
        return "is empty"
    if len(doc_id) > MAX_DOC_ID_CHARS:
        return f"is {len(doc_id)} characters long; at most {MAX_DOC_ID_CHARS}"
    if not doc_id.isprintable():
        position, char = next((i, c) for i, c in enumerate(doc_id) if not c.isprintable())
        return f"has an unprintable character U+{ord(char):04X} at position {position}"
    if doc_id != doc_id.strip():
        return "has leading or trailing whitespace"
    return None


def _check_doc_id(value: str) -> str:
    if problem := doc_id_problem(value):
        raise ValueError(f"document id {problem}")
    return value


DOC_ID_DESCRIPTION = (
    f"1-{MAX_DOC_ID_CHARS} printable characters, no leading or trailing whitespace "
    "(e.g. 'guide/install.md', 'faq/general#q3'); percent-encode it in URLs."
)

#: A document id (see ``doc_id_problem``); ids are hashed, never joined into file paths.
DocId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_DOC_ID_CHARS),
    AfterValidator(_check_doc_id),
]


# ----- JSON input -------------------------------------------------------------------------


class JSONInputError(ValueError):
    """JSON input that warmrag refuses; ``loc`` is the path to the bad value."""

    def __init__(self, loc: Loc, message: str) -> None:
        self.loc = loc
        self.message = message
        super().__init__(f"{describe_loc(loc)}: {message}" if loc else message)


def describe_loc(loc: Loc) -> str:
    """``("metadata", "tags", 0)`` -> ``metadata.tags[0]``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def json_problems(value: Any, loc: Loc = ()) -> Iterator[tuple[Loc, str]]:
    """Every value inside decoded JSON (or a Python value bound for JSON) that warmrag would
    refuse to store: bad text (``text_problem``) in keys or strings, non-finite numbers,
    integers outside 64 bits, nesting deeper than ``MAX_JSON_DEPTH``."""
    stack: list[tuple[Loc, Any]] = [(loc, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if problem := text_problem(item):
                yield where, f"text {problem}"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -_INT64 <= item < _INT64:
                yield where, "integer is outside the 64-bit range"
        elif isinstance(item, float):
            if not math.isfinite(item):
                yield where, "number is not finite (NaN and Infinity are not JSON)"
        elif len(where) - len(loc) >= MAX_JSON_DEPTH:
            yield where, f"nested more than {MAX_JSON_DEPTH} levels deep"
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    yield where, f"object key {key!r} is not a string"
                elif problem := text_problem(key):
                    yield (*where, key[:40].encode("utf-8", "replace").decode()), f"key {problem}"
                else:
                    stack.append(((*where, key), child))
        elif isinstance(item, list | tuple):
            stack.extend(((*where, i), child) for i, child in enumerate(item))
        else:
            yield where, f"{type(item).__name__} is not a JSON value"


def _reject_constant(name: str) -> Any:
    raise JSONInputError((), f"{name} is not valid JSON (numbers must be finite)")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise JSONInputError((), f"number {text[:30]} is out of range")
    return number


def loads_json(data: bytes | str) -> Any:
    """Decode JSON input strictly; ``JSONInputError`` names the first problem and where."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JSONInputError((), f"body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except JSONInputError:
        raise
    except json.JSONDecodeError as exc:
        problem = f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise JSONInputError((), problem) from None
    except RecursionError:
        raise JSONInputError((), f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as exc:  # e.g. an integer literal of more than 4300 digits
        raise JSONInputError((), f"invalid JSON: {exc}") from None
    for loc, problem in json_problems(value):
        raise JSONInputError(loc, problem)
    return value
