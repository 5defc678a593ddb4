"""Tables for a notebook on a projector: the columns the text talks about, rounded, scrolling inside themselves.

A pandas DataFrame renders as wide as its widest row and pandas cuts long cells to ``...``; in a
JupyterLab output area 592 px wide (1024 px screen, file browser open) that hides the columns the
prose discusses. `scroll_table` keeps every cell whole, rounds the numbers, and wraps the HTML in a
``crag-scroll`` box that scrolls sideways by itself instead of widening the page.

>>> import pandas as pd
>>> t = scroll_table(pd.DataFrame({"a": [0.12345], "b": ["x" * 60]}), digits=2)
>>> 'class="crag-scroll"' in t._repr_html_(), "0.12" in t._repr_html_(), "..." in t._repr_html_()
(True, True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

SCROLL_STYLE = "overflow-x:auto;max-width:100%"


class ScrollTable:
    """A DataFrame shown whole: HTML in a sideways-scrolling box, plain text without ``...`` cuts."""

    def __init__(self, frame: pd.DataFrame, *, index: bool = True) -> None:
        self.frame = frame
        self.index = index

    def _repr_html_(self) -> str:
        with pd.option_context("display.max_colwidth", None):
            body = self.frame.to_html(index=self.index, border=0, na_rep="–")
        return f'<div class="crag-scroll" style="{SCROLL_STYLE}">{body}</div>'

    def __repr__(self) -> str:
        with pd.option_context("display.max_colwidth", None, "display.width", 200):
            return self.frame.to_string(index=self.index, na_rep="–")


def scroll_table(frame: pd.DataFrame | Any, columns: Sequence[str] | None = None, *, digits: int = 3,
                 index: bool = True, rename: dict[str, str] | None = None) -> ScrollTable:
    """``frame`` (a DataFrame, or anything ``pd.DataFrame`` takes) cut to ``columns``, floats rounded to
    ``digits``, columns renamed by ``rename``; display it (or leave it last in a cell).

    Raises ``KeyError`` naming the missing columns and the ones there are.
    """
    df = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(frame)
    if columns is not None:
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise KeyError(f"no column(s) {missing}; the table has {list(df.columns)}")
        df = df[list(columns)]
    df = df.round(digits)
    if rename:
        df = df.rename(columns=rename)
    return ScrollTable(df, index=index)


__all__ = ["ScrollTable", "scroll_table"]
