"""The dashboard's controls and text: its sliders, the summary's sentences, a query's trace and re-run.

Pure helpers of `crag_lab.dashboard` (kept apart so each module stays readable): they build widgets
and HTML from a config, a replay or a record, and hold no state.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
from pydantic import ValidationError

from crag_lab.config import CragConfig
from crag_lab.parsing import strip_stats_blocks
from crag_lab.records import QueryRecord
from crag_lab.result import AskResult, UnitsWeighed

if TYPE_CHECKING:
    from crag_lab.replay import QueryReplay

FLOAT_CONTROLS = ("relevance_floor", "generate_threshold", "vector_score_threshold")
INT_CONTROLS = {"auto_approve_max_items": (0, 10), "max_iterations": (1, 6)}
BOOL_CONTROLS = ("prefilter",)
CONTROLS = (*FLOAT_CONTROLS, *INT_CONTROLS, *BOOL_CONTROLS)


def _controls(config: CragConfig) -> dict[str, Any]:
    """One widget per replayable config field, starting at the recorded value; none updates while dragged."""
    common: dict[str, Any] = {"continuous_update": False, "style": {"description_width": "170px"},
                              "layout": widgets.Layout(width="calc(100% - 8px)", max_width="560px")}
    controls: dict[str, Any] = {}
    for name in FLOAT_CONTROLS:
        value = float(getattr(config, name))
        controls[name] = widgets.FloatSlider(value=value, min=min(0.0, value), max=1.0, step=0.01,
                                             readout_format=".2f", description=name, **common)
    for name, (lo, hi) in INT_CONTROLS.items():
        value = int(getattr(config, name))
        controls[name] = widgets.IntSlider(value=value, min=min(lo, value), max=max(hi, value), step=1,
                                           description=name, **common)
    controls["prefilter"] = widgets.Checkbox(value=config.prefilter, description="pre-filter may skip the grader",
                                             indent=False, layout=widgets.Layout(width="260px"))
    for name, control in controls.items():
        control.add_class(f"crag-control-{name}")
    return controls


# ---- HTML helpers (pure) -----------------------------------------------------------------------


def _recorded_values(config: CragConfig) -> dict[str, float | int | bool]:
    return {name: getattr(config, name) for name in CONTROLS}


def _fmt_thresholds(config: CragConfig) -> str:
    t = config.thresholds()
    return (f"floor {t['relevance_floor']:g}, generate {t['generate_threshold']:g}, "
            f"vector {t['vector_score_threshold']:g}, auto-approve ≤{t['auto_approve_max_items']}, "
            f"max_iterations {t['max_iterations']}" + ("" if config.prefilter else ", pre-filter off"))


def surprises(totals: Mapping[str, int], counts: Mapping[str, int], recorded: Mapping[str, int], config: CragConfig,
              base: CragConfig) -> list[str]:
    """One sentence for each replayed number that looks wrong but is not.

    >>> surprises({"calls_delta": 3, "tokens_delta": -900}, {}, {}, CragConfig(), CragConfig())[0][:40]
    'Calls up while tokens go down: a query t'
    """
    notes = []
    if totals.get("calls_delta", 0) > 0 and totals.get("tokens_delta", 0) < 0:
        notes.append("Calls up while tokens go down: a query that leaves the recording counts the calls it must "
                     "still make, but their tokens are unknown and left out, while queries that stop earlier drop "
                     "whole grading prompts. Both are lower bounds.")
    if config.generate_threshold > base.generate_threshold and counts.get("GENERATE", 0) > recorded.get("GENERATE", 0):
        notes.append("GENERATE rises although generate_threshold went up: the threshold is compared with the mean of "
                     "the kept passages only, and the floor decides which are kept; a higher floor keeps fewer, "
                     "better-graded passages, whose mean can clear the higher threshold.")
    return notes


def _n(count: int, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{count} {noun if count == 1 else plural}"


def _delta(d: int, *, worse_when_up: bool | None = None) -> str:
    """A change against the recording, red when it is worse, green when better, grey when neither.

    >>> _delta(4, worse_when_up=True), _delta(4)
    (" <span style='color:#b91c1c'>(+4)</span>", " <span style='color:#475569'>(+4)</span>")
    """
    if not d:
        return ""
    color = "#475569" if worse_when_up is None else "#b91c1c" if (d > 0) == worse_when_up else "#15803d"
    return f" <span style='color:{color}'>({d:+d})</span>"


def _calls_change(delta: int, lower_bound: bool, leaving: int) -> str:
    """The change in model calls in words; replay knows only a lower bound when queries leave the recording.

    >>> _calls_change(-128, True, 19)
    'at most 128 fewer (19 queries leave the recording: their further calls are unknown)'
    >>> _calls_change(0, False, 0)
    'no change'
    """
    if not lower_bound:
        return "no change" if not delta else f"{abs(delta)} {'fewer' if delta < 0 else 'more'}"
    bound = f"at most {-delta} fewer" if delta < 0 else f"at least {delta} more" if delta > 0 else "at least as many"
    return f"{bound} ({_n(leaving, 'query')} leave the recording: their further calls are unknown)"


def _validation_message(exc: ValidationError) -> str:
    lines = ["These thresholds are not a valid CragConfig; move a slider back:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "config"
        lines.append(f"  {loc}: {err['msg']}")
    return "\n".join(lines) + "\n"


def _query_label(q: QueryReplay) -> str:
    before = " → ".join(q.recorded_actions) or q.recorded_outcome
    after = " → ".join(q.actions) or q.outcome
    tag = f" [{q.outcome}]" if q.outcome != q.recorded_outcome else ""  # first: a narrow list cuts the end off
    return f"{q.id}{tag}: {before}  ⇒  {after}"


def _trace_html(record: QueryRecord, replayed: QueryReplay) -> str:
    """The recorded path, every grading round with its scores, the answer, and what replay says."""
    esc = html.escape
    rows = []
    for k, rnd in enumerate(record.get("rounds", [])):
        kept = set(rnd.get("kept", []))
        scores = " ".join(
            f"<span style='color:{'#15803d' if i['id'] in kept else '#b91c1c'}'>{i['grader_score']:.2f}</span>"
            for i in rnd["items"])
        now = replayed.actions[k] if k < len(replayed.actions) else "—"
        agg = "—" if rnd.get("aggregate") is None else f"{rnd['aggregate']:.2f}"
        rows.append(f"<tr><td>{rnd['iteration']}</td><td>{esc(str(rnd.get('rule') or ''))}</td><td>{scores}</td>"
                    f"<td>{agg}</td><td>{rnd['action']}</td><td><b>{now}</b></td></tr>")
    rounds = (
        "<table style='border-collapse:collapse;font-size:90%'><tr><th>round</th><th>fast path</th>"
        "<th>grader scores (kept / dropped)</th><th>mean</th><th>recorded</th><th>now</th></tr>"
        + "".join(rows) + "</table>" if rows else "<i>no grading rounds (route skips the grader)</i>")
    note = f"<p><i>{esc(replayed.note)}</i></p>" if replayed.note else ""
    answer = esc(strip_stats_blocks(str(record.get("answer", ""))))
    if len(answer) > 600:
        answer = answer[:600] + "…"
    return (
        f"<div><b>{esc(str(record['id']))}</b>: {esc(record['query'])}<br>"
        f"<small>recorded path: {esc(' → '.join(record.get('path', [])))}</small><br>"
        f"outcome: {esc(replayed.recorded_outcome)} ⇒ <b>{esc(replayed.outcome)}</b>{note}"
        f"{rounds}<details><summary>recorded answer</summary><pre style='white-space:pre-wrap'>{answer}</pre>"
        f"{_reading_html(record)}</details></div>"
    )


def _reading_html(record: QueryRecord) -> str:
    """How the recorded answer read its evidence (the offline model says: `AskResult.weighed`), or nothing."""
    read = record.get("read")
    if not read:
        return ""
    return UnitsWeighed(read["why"], tuple(read["units"]), read["abstained"])._repr_html_()


def _rerun_html(result: AskResult, config: CragConfig) -> str:
    esc = html.escape
    return (
        f"<div style='border-left:3px solid #2563eb;padding-left:6px'><b>Re-run</b> at "
        f"<code>{esc(_fmt_thresholds(config))}</code>: route <b>{esc(result.route)}</b>, "
        f"{result.llm_calls} model calls, {result.tokens} tokens<br><small>path: {esc(' → '.join(result.path))}</small>"
        f"<pre style='white-space:pre-wrap'>{esc(strip_stats_blocks(result.answer))}</pre>"
        f"{_weighed_details(result)}</div>"
    )


def _weighed_details(result: AskResult) -> str:
    weighed = result.weighed
    if weighed.why is None and not weighed.units:
        return ""
    return f"<details><summary>how it read the evidence</summary>{weighed._repr_html_()}</details>"
