"""The partition predicate of OPTIMIZE and PURGE (`--where`), parsed (pure).

`where` is a predicate on partition columns only: `col = 'v'`, `col != 'v'` (or `<>`),
`col IN ('a', 'b')`, `col IS NULL`, `col IS NOT NULL`, joined by `AND`. Literals are
compared with the serialized partition values of the log (`'2024-01-01'`, `1`), per the
spec's "Partition Value Serialization". Anything else is refused by
`InvalidPredicateError` before the plan is made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from delta_ops.errors import InvalidPredicateError

__all__ = ["PartitionPredicate", "parse_where"]


@dataclass(frozen=True)
class PartitionPredicate:
    """A conjunction of (column, op, values) clauses on partition columns (logical names).

    `op` is one of "in", "not in", "is null", "is not null"; `values` are strings.
    """

    text: str
    clauses: tuple[tuple[str, str, tuple[str, ...]], ...]

    def matches(self, values: Mapping[str, str | None]) -> bool:
        """Whether a file with these partition values (logical name -> serialized value)
        satisfies every clause."""
        for column, op, literals in self.clauses:
            v = values.get(column)
            if op == "is null":
                ok = v is None
            elif op == "is not null":
                ok = v is not None
            elif op == "in":
                ok = v is not None and v in literals
            else:
                ok = v is not None and v not in literals
            if not ok:
                return False
        return True


_LITERAL = r"'(?:[^']|'')*'|-?\d+(?:\.\d+)?|true|false"
_CLAUSE = re.compile(
    r"^\s*(?P<col>`[^`]+`|[A-Za-z_][\w.]*)\s*(?:"
    r"(?P<cmp>=|==|!=|<>)\s*(?P<lit>" + _LITERAL + r")"
    r"|(?P<not>not\s+)?in\s*\((?P<list>.*)\)"
    r"|is\s+(?P<isnot>not\s+)?null)\s*$",
    re.IGNORECASE | re.DOTALL,
)


def _literal(text: str) -> str:
    text = text.strip()
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    return text.lower() if text.lower() in ("true", "false") else text


def parse_where(where: str, partition_columns: Sequence[str], *,
                table: str | None = None) -> PartitionPredicate:
    """Parse a partition predicate (grammar in the module docstring).

    Raises:
        InvalidPredicateError: a clause that does not parse, or names a column that is not
            a partition column (the message lists the partition columns).
    """
    known = {c.lower(): c for c in partition_columns}
    if not known:
        raise InvalidPredicateError(
            f"--where {where!r}: the table is not partitioned, so there is no partition "
            "column to filter on", table=table)
    clauses = []
    for part in re.split(r"\s+and\s+", where.strip(), flags=re.IGNORECASE):
        m = _CLAUSE.match(part)
        if m is None:
            raise InvalidPredicateError(
                f"--where clause {part.strip()!r} is not one of: col = 'v', col != 'v', "
                "col IN ('a', 'b'), col IS [NOT] NULL (joined by AND)", table=table)
        col = m.group("col").strip("`")
        if col.lower() not in known:
            raise InvalidPredicateError(
                f"--where names column {col!r}, which is not a partition column; OPTIMIZE "
                f"and PURGE filter on partition columns only: {sorted(known.values())}",
                table=table)
        col = known[col.lower()]
        if m.group("cmp"):
            op = "in" if m.group("cmp") in ("=", "==") else "not in"
            values: tuple[str, ...] = (_literal(m.group("lit")),)
        elif m.group("list") is not None:
            items = re.findall(_LITERAL, m.group("list"), flags=re.IGNORECASE)
            rest = re.sub(_LITERAL, "", m.group("list"), flags=re.IGNORECASE)
            if not items or rest.replace(",", "").strip():
                raise InvalidPredicateError(
                    f"--where clause {part.strip()!r}: IN takes a list of literals",
                    table=table)
            op = "not in" if m.group("not") else "in"
            values = tuple(_literal(i) for i in items)
        else:
            op = "is not null" if m.group("isnot") else "is null"
            values = ()
        clauses.append((col, op, values))
    return PartitionPredicate(where.strip(), tuple(clauses))
