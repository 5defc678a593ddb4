"""Formatting helpers shared by the RESULTS.md renderers (`_report`, `_report_scaleout`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NA = "n/a"


def f(x: Any, digits: int = 2, unit: str = "") -> str:
    if x is None:
        return NA
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}{unit}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}{unit}"
    return f"{x}{unit}"


def sci(x: float | None) -> str:
    return NA if x is None else f"{x:.1e}"


def pct(x: float | None, digits: int = 1) -> str:
    return NA if x is None else f"{100 * x:.{digits}f} %"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def status(ok: bool | None, detail: str = "") -> str:
    if ok is None:
        return "not measured"
    return ("**met**" if ok else "**missed**") + (f" ({detail})" if detail else "")


def against(value: float | None, limit: float, *, at_most: bool = True, digits: int = 3, unit: str = "") -> str:
    """Met/missed for ``value`` against ``limit``, with the margin either way ("by ..." when missed)."""
    if value is None:
        return "not measured"
    ok = value <= limit if at_most else value >= limit
    gap = abs(value - limit)
    sign = "≤" if at_most else "≥"
    return status(ok, f"{f(value, digits)}{unit} {sign} {f(limit, digits)}{unit}, margin {f(gap, digits)}{unit}"
                  if ok else f"by {f(gap, digits)}{unit}: {f(value, digits)}{unit} vs {f(limit, digits)}{unit}")


def get(d: Mapping[str, Any] | None, *keys: Any) -> Any:
    cur: Any = d
    for k in keys:
        if not isinstance(cur, Mapping) or k not in cur:
            return None
        cur = cur[k]
    return cur
