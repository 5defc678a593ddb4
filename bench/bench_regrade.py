"""Regrade speed: 140 recorded questions regraded (a cached grader) and replayed, vs re-running them.

The recording is ``notebooks/recordings/kb_knowledge_base.jsonl`` (140 labelled KB questions, the
offline model). `Experiment.regrade` regrades it with the offline grader behind a response cache
(`crag_lab.cache.ResponseCache`, a fresh SQLite file): the first regrade fills the cache (*cold*:
the grader runs), the next ones read it (*cached*: no grading call reaches the model), each followed
by a replay at the recorded thresholds and the frontier of the default grid. The real re-run answers
the same 140 questions with `Lab.run` (the same offline model, the graph end to end). Regrade and
re-run alternate in one process (three rounds of each), medians; the ratio is re-run over cached
regrade + replay + frontier. The cached regrade is checked to reproduce the recording's grades.

    .venv/bin/python bench/bench_regrade.py [--quick] [--json out.json]

Result keys: ``questions``, ``items_graded``, ``cold_s``, ``cached_s`` (regrade, replay, frontier,
total), ``rerun_s``, ``ratio``, ``reproduces_recording``, ``cache_hits``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from _common import KB, ROOT, SCRATCH, emit, load_average, log, parse_args, ratio

RECORDING = ROOT / "notebooks" / "recordings" / "kb_knowledge_base.jsonl"


def grades(exp: Any) -> list[list[float]]:
    from crag_lab.records import round_grades

    return [list(g[0]) if (g := round_grades(rnd)) else [] for rec in exp.records for rnd in rec["rounds"]]


def regrade_and_replay(exp: Any, kb: Any, cache: Any) -> tuple[Any, dict[str, float]]:
    """One regrade (offline grader behind ``cache``), a replay and a frontier; seconds of each (wall)."""
    t0 = time.perf_counter()
    new = exp.regrade("offline", texts=kb, cache=cache)
    t1 = time.perf_counter()
    new.replay()
    t2 = time.perf_counter()
    new.frontier()
    t3 = time.perf_counter()
    return new, {"regrade": t1 - t0, "replay": t2 - t1, "frontier": t3 - t2, "total": t3 - t0}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv)
    from crag_lab import Lab
    from crag_lab.cache import ResponseCache
    from crag_lab.replay import Experiment

    exp = Experiment.load(RECORDING)
    if args.quick:
        exp = Experiment(exp.config, exp.records[::7], exp.meta)
    lab = Lab.from_directory(KB, remote=False)
    lab.prepare()
    cache_file = SCRATCH / "regrade-cache.sqlite"
    cache_file.unlink(missing_ok=True)
    cache = ResponseCache(cache_file)
    rows = [{"id": r["id"], "question": r["query"], **{k: v for k, v in r["labels"].items() if k != "gold_paths"}}
            for r in exp.records]

    cold_new, cold = regrade_and_replay(exp, lab.kb, cache)
    log(f"regrade: cold {cold['total']:.2f} s ({cold_new.meta['grader']['calls']} grading calls, "
        f"{cold_new.meta['grader']['items_graded']} items)")
    cached_runs: list[dict[str, float]] = []
    rerun_s: list[float] = []
    hits = []
    new = cold_new
    for rep in range(3):
        pair = ["regrade", "rerun"] if rep % 2 == 0 else ["rerun", "regrade"]
        for what in pair:
            if what == "regrade":
                new, t = regrade_and_replay(exp, lab.kb, cache)
                cached_runs.append(t)
                usage = [u for rec in new.records for u in rec["usage"] if u["node"] == "grade_evidence"]
                usage += [u for rec in new.records for r in rec["rounds"] for u in (r.get("shadow") or {}).get("usage", [])]
                hits.append(sum(bool(u.get("cached")) for u in usage) / max(len(usage), 1))
                log(f"regrade: cached {t['total']:.2f} s")
            else:
                t0 = time.perf_counter()
                lab.run(rows, shadow_grading=True)
                rerun_s.append(time.perf_counter() - t0)
                log(f"regrade: re-run of {len(rows)} questions {rerun_s[-1]:.1f} s")
    cached = {k: round(statistics.median(r[k] for r in cached_runs), 3) for k in cached_runs[0]}
    rerun = statistics.median(rerun_s)
    same = grades(new) == grades(exp)
    result = {
        "quick": args.quick,
        "load_average": load_average(),
        "recording": str(RECORDING.relative_to(ROOT)),
        "questions": len(exp.records),
        "items_graded": new.meta["grader"]["items_graded"],
        "grading_calls": new.meta["grader"]["calls"],
        "cold_s": {k: round(v, 3) for k, v in cold.items()},
        "cached_s": cached,
        "cache_hits": round(min(hits), 4),
        "rerun_s": round(rerun, 2),
        "rerun_s_per_question": round(rerun / len(rows), 3),
        "ratio": ratio(rerun, cached["total"], 1),
        "ratio_cold": ratio(rerun, cold["total"], 1),
        "reproduces_recording": same,
    }
    log(f"regrade: cached regrade+replay+frontier {cached['total']:.2f} s vs re-run {rerun:.1f} s: "
        f"{result['ratio']}x; reproduces the recording: {same}")
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
