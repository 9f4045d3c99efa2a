"""The base of every result the benchmarks write as JSON (results.json, ``--out`` files)
and the report reads back.

A key is written when it was given a value: a section that did not run, a number a
strategy does not have (``budget_tokens`` without warmup) or a field an older run did not
record is left unset and stays out of the file, so results.json keeps the keys it always
had, and one read back and written again (``python -m bench.report``) keeps exactly its
own. Values measured in-process and never written are plain dataclasses instead.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """A finished result: immutable once measured."""

    model_config = ConfigDict(frozen=True)

    def to_json(self) -> dict[str, object]:
        """The JSON object as written: the fields that were given, nested ones likewise."""
        return self.model_dump(exclude_unset=True)


class GrowingRecord(Record):
    """A result filled in step by step (a section's parts, a run's meta): a failure part
    way keeps what was measured before it. Assigning a field marks it given."""

    model_config = ConfigDict(frozen=False, validate_assignment=True)
