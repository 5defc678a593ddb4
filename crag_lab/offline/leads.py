"""The answer's bold lead as markdown that renders: whole code spans, never a row's label.

A lead is cut from the first quote, by the span reader (`crag_lab.offline.synthesizer.span_lead`) or
by the rules (`short_answer`). A cut can fall inside a code span: the reader reads the backticks as
tokens, so for ``Prefix: `nv_live_` (production), `nv_test_` (sandbox)`` it may answer
``nv_test_` `` with the closing backtick and not the opening one. Written as ``**nv_test_`**`` that
lead opens a code span the answer never closes, and a notebook renders the rest of the answer as
code. `markdown_lead` widens such a cut to the code spans whose backticks it splits. A lead that is only a label
of the quote's labelled row (``SLO`` of ``SLO: …; Target: < 150 ms``) names what is asked, not the
answer: it is no lead.

>>> markdown_lead("nv_test_`", "Prefix: `nv_live_` (production), `nv_test_` (sandbox)")
'`nv_test_`'
>>> markdown_lead("SLO", "SLO: token endpoint p99; Target: < 150 ms") is None
True
"""

from __future__ import annotations

from crag_lab.offline.units import labelled


def code_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text``'s code spans are: (index of the opening backtick, index past the closing one), pairing
    backticks left to right; a last unpaired backtick opens nothing.

    >>> code_spans("run `make` or `make test`")
    [(4, 10), (14, 25)]
    """
    ticks = [i for i, char in enumerate(text) if char == "`"]
    return [(ticks[k], ticks[k + 1] + 1) for k in range(0, len(ticks) - 1, 2)]


def markdown_lead(lead: str | None, quote: str) -> str | None:
    """``lead`` (a piece of ``quote``) widened to each code span of ``quote`` whose backticks it holds one of, so its
    backticks pair up as they do in the quote; None when it is a label of ``quote``'s labelled row or, widened, the
    whole quote. A lead inside one code span holds none of its backticks and stays as it is.

    >>> markdown_lead("journal_entries`) holds", "table `journal_entries`) holds it")
    '`journal_entries`) holds'
    >>> markdown_lead("100", "set `max.poll.records: 100` now")
    '100'
    >>> markdown_lead("8443", "Public listener: 8443 (TLS)")
    '8443'
    """
    if lead is None:
        return None
    if any(lead.strip("` ").lower() == label.strip("` ").lower() for label, _ in labelled(quote)):
        return None
    start = quote.find(lead)
    if start < 0:
        return lead
    end = start + len(lead)
    for opens, closes in code_spans(quote):
        if (start <= opens < end) != (start <= closes - 1 < end):  # holds one of this span's backticks, not both
            start, end = min(start, opens), max(end, closes)
    widened = quote[start:end]
    return None if widened.strip("`") == quote.strip().strip("`") else widened
