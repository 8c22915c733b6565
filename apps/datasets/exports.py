"""Datasets written out: SFT rows and preference pairs, as JSON Lines or Parquet.

Both formats hold the same rows (``apps.datasets.conversation``) with the same columns;
both read back with ``datasets.load_dataset("json" | "parquet", data_files=...)``. JSON
Lines is written as it is read (a few hundred runs' messages in memory at a time);
Parquet is written in row groups to a temporary file (its footer comes last).
Nothing of a person's credentials is in a run's messages or in the columns: a row holds
the conversation, the domain's tool schemas and the run's id, task, reward, model and kind.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from apps.datasets.conversation import preference_row, sft_row
from apps.datasets.selectors import (
    CHUNK,
    PARQUET,
    PREFERENCE,
    Selection,
    conversations,
    dataset_runs,
    pair_plan_of,
)

TOOL_CALL = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
    ]
)
MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("tool_call_id", pa.string()),
    ]
)
MESSAGES = pa.list_(MESSAGE)

SFT_SCHEMA = pa.schema(
    [
        ("messages", MESSAGES),
        ("tools", pa.string()),
        ("run_id", pa.int64()),
        ("domain", pa.string()),
        ("task_id", pa.string()),
        ("reward", pa.float64()),
        ("model", pa.string()),
        ("kind", pa.string()),
        ("evaluation_id", pa.int64()),
    ]
)
PREFERENCE_SCHEMA = pa.schema(
    [
        ("prompt", MESSAGES),
        ("chosen", MESSAGES),
        ("rejected", MESSAGES),
        ("tools", pa.string()),
        ("domain", pa.string()),
        ("task_id", pa.string()),
        ("chosen_run_id", pa.int64()),
        ("rejected_run_id", pa.int64()),
        ("chosen_reward", pa.float64()),
        ("rejected_reward", pa.float64()),
        ("chosen_model", pa.string()),
        ("rejected_model", pa.string()),
    ]
)


def sft_rows(selection: Selection) -> Iterator[dict[str, Any]]:
    """One SFT row per run of the selection's dataset, in the order of run ids."""
    ids = list(dataset_runs(selection).values_list("id", flat=True))
    for conversation in conversations(ids):
        yield dict(sft_row(conversation))


def preference_rows(selection: Selection) -> Iterator[dict[str, Any]]:
    """One row per preference pair of the selection (``pair_plan``'s order)."""
    pairs = pair_plan_of(selection)
    step = max(CHUNK // 2, 1)
    for start in range(0, len(pairs), step):
        window = pairs[start : start + step]
        ids = sorted({pk for pair in window for pk in pair})
        rows = {c.run_id: sft_row(c) for c in conversations(ids)}
        for chosen, rejected in window:
            yield dict(preference_row(rows[chosen], rows[rejected]))


def rows_of(selection: Selection) -> Iterator[dict[str, Any]]:
    return preference_rows(selection) if selection.kind == PREFERENCE else sft_rows(selection)


def schema_of(selection: Selection) -> pa.Schema:
    return PREFERENCE_SCHEMA if selection.kind == PREFERENCE else SFT_SCHEMA


def jsonl_lines(rows: Iterable[dict[str, Any]], *, batch: int = 50) -> Iterator[bytes]:
    """The rows as JSON Lines, ``batch`` rows per chunk."""
    lines: list[str] = []
    for row in rows:
        lines.append(json.dumps(row, ensure_ascii=False))
        if len(lines) >= batch:
            yield ("\n".join(lines) + "\n").encode()
            lines = []
    if lines:
        yield ("\n".join(lines) + "\n").encode()


def write_parquet(rows: Iterable[dict[str, Any]], *, schema: pa.Schema, out: IO[bytes]) -> int:
    """Write the rows to ``out`` as Parquet (row groups of ``CHUNK`` rows); the row count."""
    count = 0
    with pq.ParquetWriter(out, schema) as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= CHUNK:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
                batch = []
        if batch or not count:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count


def parquet_file(selection: Selection) -> IO[bytes]:
    """The selection's dataset as a Parquet temporary file, at its start (closed: gone)."""
    out = tempfile.TemporaryFile(suffix=".parquet")  # noqa: SIM115 - the response closes it
    write_parquet(rows_of(selection), schema=schema_of(selection), out=out)
    out.seek(0)
    return out


def filename(selection: Selection) -> str:
    """``tau2-<sft|preference>[-<domain>][-evaluation-<id>].<jsonl|parquet>``."""
    parts = ["tau2", selection.kind]
    if selection.filters.domain:
        parts.append(selection.filters.domain)
    if selection.evaluation is not None:
        parts.append(f"evaluation-{selection.evaluation}")
    extension = "parquet" if selection.format == PARQUET else "jsonl"
    safe = "-".join("".join(ch for ch in p if ch.isalnum() or ch in "-_") for p in parts)
    return f"{safe}.{extension}"
