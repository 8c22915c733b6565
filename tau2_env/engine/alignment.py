"""Aligning the tool calls of 2–4 runs of one task, for compare: by expected action and
by tool-call signature, with gaps where one run has calls the others have not.

Pure functions over :class:`Call` values (no Django, no τ² objects). :func:`align` is a
progressive (centre-first) Needleman–Wunsch alignment: the centre (the task's expected
actions, when the runs share a task) or else the first run is the starting profile; each
run is then aligned against the profile built so far, so a call two runs make and the
task does not expect still lines up in one row. Gaps cost nothing; two calls may share a
row only when they are of the same tool (and, when both are anchored to an expected
action, the same one), so the alignment is the heaviest common subsequence, where an
anchored pair weighs most, then the same call, then the same tool with other arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Call", "Row", "align", "differing_args"]

ANCHORED = 6  # both calls match or try the same expected action
SAME_CALL = 3  # same tool, same arguments
SAME_TOOL = 1  # same tool, other arguments


@dataclass(frozen=True)
class Call:
    """One tool call (or expected action): who calls it, the tool, its arguments, and the
    index of the expected action it matches or tries (``anchor``; ``None`` if none)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    anchor: int | None = None
    requestor: str = "assistant"

    def signature(self) -> tuple[str, str, str]:
        return (self.requestor, self.name, _canonical(self.arguments))


@dataclass(frozen=True)
class Row:
    """One row of an alignment: the centre's index in it (``None``: a gap, or no centre)
    and, per run, the index of its call in this row (``None``: a gap)."""

    centre: int | None
    cells: tuple[int | None, ...]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def similarity(a: Call, b: Call) -> int | None:
    """How much ``a`` and ``b`` gain by sharing a row; ``None`` when they may not."""
    if a.name != b.name or a.requestor != b.requestor:
        return None
    if a.anchor is not None and b.anchor is not None:
        return ANCHORED if a.anchor == b.anchor else None
    return SAME_CALL if a.signature() == b.signature() else SAME_TOOL


def _column_score(column: Sequence[Call], call: Call) -> int | None:
    total = 0
    for other in column:
        score = similarity(other, call)
        if score is None:
            return None
        total += score
    return total


def _align_to_profile(
    profile: list[list[Call]], calls: Sequence[Call]
) -> list[tuple[int | None, int | None]]:
    """Needleman–Wunsch of ``calls`` against the profile's columns (the calls each holds):
    pairs (column index, call index), either ``None`` for a gap, in order."""
    n, m = len(profile), len(calls)
    score = [[0] * (m + 1) for _ in range(n + 1)]
    pair: list[list[int | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            best = max(score[i - 1][j], score[i][j - 1])
            gain = _column_score(profile[i - 1], calls[j - 1])
            if gain is not None and score[i - 1][j - 1] + gain >= best:
                best = score[i - 1][j - 1] + gain
                pair[i][j] = gain
            score[i][j] = best
    steps: list[tuple[int | None, int | None]] = []
    i, j = n, m
    while i or j:
        gained = pair[i][j]
        if i and j and gained is not None and score[i][j] == score[i - 1][j - 1] + gained:
            steps.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif j and (not i or score[i][j] == score[i][j - 1]):
            steps.append((None, j - 1))  # a call the profile has no column for
            j -= 1
        else:
            steps.append((i - 1, None))  # a column this run has no call in
            i -= 1
    steps.reverse()
    return steps


def align(runs: Sequence[Sequence[Call]], centre: Sequence[Call] | None = None) -> list[Row]:
    """The rows of the runs' calls aligned (each run's calls keep their order).

    ``centre``: the task's expected actions (``anchor`` = their index), aligned first
    so that each run's calls fall in the rows of the expected actions they match or
    try; without it the first run is the centre. A run with no calls is all gaps.
    """
    sequences: list[Sequence[Call]] = ([centre] if centre is not None else []) + list(runs)
    if not sequences:
        return []
    # The profile: columns of (sequence index, call index), and the calls they hold.
    columns: list[dict[int, int]] = [{0: j} for j in range(len(sequences[0]))]
    held: list[list[Call]] = [[call] for call in sequences[0]]
    for s in range(1, len(sequences)):
        calls = sequences[s]
        merged_columns: list[dict[int, int]] = []
        merged_held: list[list[Call]] = []
        for column, j in _align_to_profile(held, calls):
            if column is None:
                assert j is not None  # a step is never a gap on both sides
                merged_columns.append({s: j})
                merged_held.append([calls[j]])
            else:
                if j is not None:
                    columns[column][s] = j
                    held[column].append(calls[j])
                merged_columns.append(columns[column])
                merged_held.append(held[column])
        columns, held = merged_columns, merged_held
    offset = 1 if centre is not None else 0
    return [
        Row(
            centre=column.get(0) if centre is not None else None,
            cells=tuple(column.get(s + offset) for s in range(len(runs))),
        )
        for column in columns
    ]


def differing_args(calls: Sequence[Call | None]) -> tuple[str, ...]:
    """The arguments on which the calls of one row (gaps left out) do not all agree:
    a value that differs, or an argument some call lacks; in order of first use."""
    present = [c for c in calls if c is not None]
    names = list(dict.fromkeys(name for c in present for name in c.arguments))

    def value(call: Call, name: str) -> str:
        return _canonical(call.arguments[name]) if name in call.arguments else "\0absent"

    return tuple(name for name in names if len({value(c, name) for c in present}) > 1)
