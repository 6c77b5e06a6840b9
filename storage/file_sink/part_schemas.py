"""The Arrow schema of each part, kept in the commit records, so reading back gives the types written.

JSON lines and CSV hold text: without the schema a timestamp reads back as a
string, a decimal as a string or a float, bytes as base64 and ``"02134"`` as
2134. A part's schema is the one of the rows written into it, widened as
later batches append where no value changes type: a column all null at first
takes the type of the values that follow, a column more joins (JSON lines).
Rows of any other type (integers, then floats or text) start a new part, as
CSV rows under another header do: a promoted type would not hold every value
before it (pyarrow's permissive promotion takes int64 for int64 and uint64,
binary for text and bytes, float64 for 2**53 + 1 and a decimal). Records name
schemas by a digest of their text and hold each text once
(``SinkState.schemas``), as manifests do.
"""

from __future__ import annotations

import base64
import hashlib

import pyarrow as pa

from .errors import DamagedCommitRecordError


def schema_text(schema: pa.Schema) -> str:
    """An Arrow schema as text (its IPC bytes in base64), for a file's metadata or a commit record."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str | bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def digest(text: str) -> str:
    """The name a record gives a schema's text."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def widened(current: pa.Schema | None, rows: pa.Schema) -> pa.Schema | None:
    """The schema of a part holding rows of ``current`` and of ``rows``: the two merged where they differ in null
    columns (and columns one of them lacks) only; None otherwise (the rows need a part of their own)."""
    if current is None or current.equals(rows):
        return rows
    try:
        return pa.unify_schemas([current, rows], promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None


class SchemaBook:
    """Schema texts by digest, and the schemas they parse to, for one writer or reader."""

    def __init__(self, texts: dict[str, str] | None = None) -> None:
        self.texts: dict[str, str] = dict(texts or {})
        self._parsed: dict[str, pa.Schema] = {}

    def name(self, schema: pa.Schema) -> str:
        """The digest of ``schema`` (without pandas' metadata, which differs from batch to batch), its text kept."""
        schema = schema.remove_metadata()
        text = schema_text(schema)
        key = digest(text)
        self.texts[key] = text
        self._parsed[key] = schema
        return key

    def schema(self, key: str) -> pa.Schema | None:
        """The schema named ``key``; None for "" (a part written before schemas were kept)."""
        if not key:
            return None
        if key not in self._parsed:
            if key not in self.texts:
                raise DamagedCommitRecordError(
                    f"file sink commit records name schema {key} for a part but hold no text of it: a record or "
                    "manifest was edited or damaged since; restore it from a backup"
                )
            self._parsed[key] = schema_from_text(self.texts[key])
        return self._parsed[key]
