"""RESULTS.md section 13: the learned readers' rows batched by length against the batches before."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _report_fmt import f, pct, sci, table

READERS = {"spans": ("span reader", "passages", "same span", "margin"),
           "scorer": ("answer scorer", "pairs", "same probability to 3 places", "probability")}
BEFORE = {"spans": "one batch of up to 32 windows in order, padded to its longest",
          "scorer": "pairs sorted by length, 64 a batch, each padded to its longest"}


def headline_batching(bt: Mapping[str, Any]) -> list[str]:
    """The headline row: each reader's time with length batches, as a share of its time before."""
    return ["13", "learned readers: rows batched by length vs before (the same calls)",
            "; ".join(f"{READERS[k][0]} {f(bt[k]['ratio_total_median'], 3)}×" for k in READERS), "info"]


def section_batching(bt: Mapping[str, Any]) -> str:
    out = ["## 13. The learned readers' batches\n",
           f"`bench/bench_batching.py`: the offline model answers {bt['questions']} stratified KB questions on a prepared "
           "index while every call of the span reader and of the answer scorer is recorded; the calls are then made "
           "again, each with the reader's memory cleared, the way the readers batched before and grouped by length "
           f"(`crag_lab.learned.batching.length_batches`, a pass costed at {bt['pass_cost_tokens']} tokens), "
           f"each call both ways back to back, which goes first alternating from call to call, {bt['repeats']} repeats, "
           "medians.\n"]
    rows = []
    for key, (name, _, _, _) in READERS.items():
        r = bt[key]
        for way, label in (("before", BEFORE[key]), ("length_batches", "grouped by length")):
            tok = r["tokens"][way]
            rows.append([name, f(r["calls"]), label, f(r["total_ms"][way]["median"], 0),
                         f(r["per_call_ms"][way]["median"], 1), f(r["per_call_ms"][way]["p95"], 1), f(tok["padded"]),
                         f"+{pct(tok['padded'] / tok['real'] - 1, 1)}"])
    out.append(table(["reader", "calls", "batches", "all calls ms", "per call ms (median)", "per call p95",
                      "tokens read", "padding over real"], rows))
    for key, (name, unit, same, number) in READERS.items():
        r = bt[key]
        out.append(f"- {name}: {f(r['ratio_total_median'], 3)}× the time; {same} in {f(r['same_result'])} of "
                   f"{f(r['rows'])} {unit}, the very same {number} in {f(r['same_number'])} (the rest differ by at most "
                   f"{sci(r['max_difference'])}: a batch's width moves the last float digits before rounding).")
    return "\n".join(out) + "\n"
