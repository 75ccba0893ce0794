"""Filters: `dataset_filter` conditions (`column op operand`) and the rows they keep."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

FILTER_OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "in", "not_in")


class Condition(NamedTuple):
    """One `dataset_filter` condition: `column op operand`."""

    column: str
    op: str
    operand: Any

    def __str__(self) -> str:
        return f"{self.column} {self.op} {self.operand!r}"


def parse_filter(spec: Any, where: str) -> list[Condition]:
    """The conditions of a `dataset_filter` mapping, in order; raise a `ValueError` on a malformed one."""
    if not isinstance(spec, dict):
        raise ValueError(
            f"{where} must be a mapping of column: condition, got {type(spec).__name__} {spec!r}. Example: "
            "{level: ['Level 3', 'Level 4', 'Level 5']}."
        )
    conditions = []
    for column, condition in spec.items():
        if isinstance(condition, dict):
            for op, operand in condition.items():
                if op not in FILTER_OPERATORS:
                    raise ValueError(
                        f"{where}: unknown operator {op!r} for column {column!r}. Use one of: "
                        f"{', '.join(FILTER_OPERATORS)}."
                    )
                if op in ("in", "not_in") and not isinstance(operand, list):
                    raise ValueError(f"{where}: {column!r} {op} needs a list of values, got {operand!r}.")
                conditions.append(Condition(str(column), op, operand))
        elif isinstance(condition, list):
            conditions.append(Condition(str(column), "in", condition))
        else:
            conditions.append(Condition(str(column), "==", condition))
    return conditions


def condition_holds(value: Any, op: str, operand: Any) -> bool:
    """Whether `value op operand` holds (`in`/`not_in`: membership in the operand list)."""
    if op == "==":
        return value == operand
    if op == "!=":
        return value != operand
    if op == "in":
        return value in operand
    if op == "not_in":
        return value not in operand
    if value is None:
        return False
    if op == "<":
        return value < operand
    if op == "<=":
        return value <= operand
    if op == ">":
        return value > operand
    if op == ">=":
        return value >= operand
    raise ValueError(f"Unknown filter operator {op!r}. Use one of: {', '.join(FILTER_OPERATORS)}.")


def _examples(values: Sequence[Any], limit: int = 8) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value not in seen:
            seen.append(value)
            if len(seen) == limit:
                break
    return seen


def filter_indices(columns: dict[str, list], conditions: Sequence[Condition], where: str) -> list[int]:
    """Indices of the rows that satisfy every condition; raise if a condition leaves no row, naming that condition.

    `columns` maps each filtered column name to its values (one per row).
    """
    keep = list(range(len(next(iter(columns.values())))) if columns else [])
    for condition in conditions:
        values = columns[condition.column]
        before = len(keep)
        try:
            keep = [i for i in keep if condition_holds(values[i], condition.op, condition.operand)]
        except TypeError as error:
            raise ValueError(
                f"{where}: dataset_filter condition `{condition}` cannot compare column {condition.column!r} "
                f"(values such as {_examples([values[i] for i in keep], 3)!r}) with {condition.operand!r}: {error}."
            ) from error
        if not keep:
            raise ValueError(
                f"{where}: dataset_filter condition `{condition}` kept 0 of {before} rows, so the dataset is empty. "
                f"Column {condition.column!r} holds values such as {_examples(values)!r}; fix the filter."
            )
    return keep
