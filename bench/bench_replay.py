"""Replay speed: re-decide 10,000 recorded grading rounds at new thresholds, vs re-running the graph.

The rounds come from a real run (``.cache/bench/runs/knowledge_base.jsonl``, written by
bench_calls.py; recorded here if missing): the records that have grading rounds are replicated
(new ids) until they hold 10,000 rounds. ``Experiment.replay`` (its default, vectorised engine,
compiled once per experiment) is timed at several threshold changes alongside the scalar reference
``Experiment.replay(..., engine="scalar")`` (interleaved, medians, wall and CPU time); their reports
are checked equal on every configuration. The graph is re-run on a sample of the same questions at
the new thresholds for the ratio.

    .venv/bin/python bench/bench_replay.py [--quick] [--json out.json]

Result keys: ``replay_ms`` (the default engine), ``scalar_ms`` (the reference), ``equal_to_scalar``,
``per_change``, ``rerun``.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from _common import KB, RUNS, emit, grader_failures, load_average, load_rows, log, parse_args, ratio, summary

TARGET_ROUNDS = 10_000
CHANGES: dict[str, dict[str, Any]] = {
    "relevance_floor=0.4": {"relevance_floor": 0.4},
    "generate_threshold=0.6": {"generate_threshold": 0.6},
    "vector_score_threshold=0.75": {"vector_score_threshold": 0.75},
    "aggregator=max": {"aggregator": "max"},
    "all four": {"relevance_floor": 0.25, "generate_threshold": 0.65, "vector_score_threshold": 0.85,
                 "auto_approve_max_items": 3},
}


def recorded_run(quick: bool) -> Any:
    from crag_lab.replay import Experiment

    for name in ("knowledge_base.jsonl", "knowledge_base-quick.jsonl"):
        if (RUNS / name).is_file():
            log(f"replay: using the recorded run {RUNS / name}")
            return Experiment.load(RUNS / name)
    from crag_lab import Lab

    log("replay: no recorded run from bench_calls.py; recording one now")
    lab = Lab.from_directory(KB, remote=False)
    exp = lab.run(load_rows(40 if quick else None), shadow_grading=True)
    exp.save(RUNS / ("knowledge_base-quick.jsonl" if quick else "knowledge_base.jsonl"))
    return exp


def replicate(exp: Any, rounds: int) -> Any:
    """Copies of the records that have grading rounds (new ids) until they hold ``rounds`` rounds."""
    from crag_lab.replay import Experiment

    source = [r for r in exp.records if r.get("rounds")]
    if not source:
        raise SystemExit("the recorded run has no grading rounds: nothing to replay")
    records, total, i = [], 0, 0
    while total < rounds:
        rec = source[i % len(source)]
        records.append({**rec, "id": f"{rec['id']}~{i // len(source)}"})
        total += len(rec["rounds"])
        i += 1
    return Experiment(exp.config, records, dict(exp.meta))


def random_configs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [{}, {"max_iterations": 1}, {"max_iterations": 5}, {"prefilter": False},
                                 {"aggregator": "any_above", "relevance_floor": 0.2}]
    for _ in range(n):
        floor = round(rng.uniform(0, 0.7), 2)
        out.append({"relevance_floor": floor, "generate_threshold": round(rng.uniform(floor, 1), 2),
                    "vector_score_threshold": round(rng.uniform(0.3, 1), 2),
                    "auto_approve_max_items": rng.randint(0, 6), "max_iterations": rng.randint(1, 5),
                    "aggregator": rng.choice(["mean", "max", "any_above"])})
    return out


def timed(fn: Any) -> tuple[float, float]:
    """(wall ms, CPU ms) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - w) * 1000, (time.process_time() - c) * 1000


def profile_replay(exp: Any, changes: dict[str, Any], engine: str) -> list[dict[str, Any]]:
    """The functions replay spends its own time in (cProfile, garbage collector off)."""
    gc.collect()
    gc.disable()
    try:
        prof = cProfile.Profile()
        prof.enable()
        exp.replay(**changes, engine=engine)
        prof.disable()
    finally:
        gc.enable()
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{file.rsplit('/', 1)[-1]}:{line}({fn})", "calls": nc,
                     "tottime_share": round(tt / total, 3), "cumtime_ms": round(ct * 1000, 1)})
    return sorted(rows, key=lambda r: -r["tottime_share"])[:10]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv)

    started = time.perf_counter()
    recorded = recorded_run(args.quick)
    big = replicate(recorded, TARGET_ROUNDS)
    n_rounds = sum(len(r["rounds"]) for r in big.records)
    n_items = sum(len(rnd["items"]) for r in big.records for rnd in r["rounds"])
    log(f"replay: {len(big.records)} records, {n_rounds} rounds, {n_items} graded items")

    # The first replay builds the arrays (once per experiment): its cost beyond a compiled replay.
    first = timed(lambda: big.replay(big.config))
    again = timed(lambda: big.replay(big.config))
    compile_ms = {"wall": round(first[0] - again[0], 1), "cpu": round(first[1] - again[1], 1),
                  "first_replay_wall": round(first[0], 1), "first_replay_cpu": round(first[1], 1)}
    # Sanity: replay at the recorded thresholds changes nothing.
    same = big.replay(big.config).totals()

    configs = random_configs(8 if args.quick else 15) + list(CHANGES.values())
    equal = sum(big.replay(**c) == big.replay(**c, engine="scalar") for c in configs)
    log(f"replay: default engine == scalar reference on {equal}/{len(configs)} configurations")

    repeats = 5 if args.quick else 7
    per_change: dict[str, Any] = {}
    fast_wall, fast_cpu, scalar_wall, scalar_cpu = [], [], [], []
    for label, changes in CHANGES.items():
        rows: dict[str, list[tuple[float, float]]] = {"vectorised": [], "scalar": []}
        for rep in range(repeats):
            pair = [("vectorised", lambda c=changes: big.replay(**c)),
                    ("scalar", lambda c=changes: big.replay(**c, engine="scalar"))]
            for name, fn in pair if rep % 2 == 0 else reversed(pair):
                rows[name].append(timed(fn))
        report = big.replay(**changes)
        visited = sum(len(q.actions) for q in report.queries)
        fw = statistics.median(w for w, _ in rows["vectorised"])
        fc = statistics.median(c for _, c in rows["vectorised"])
        sw = statistics.median(w for w, _ in rows["scalar"])
        sc = statistics.median(c for _, c in rows["scalar"])
        fast_wall.append(fw)
        fast_cpu.append(fc)
        scalar_wall.append(sw)
        scalar_cpu.append(sc)
        fast_ms, scalar_ms = {"wall": round(fw, 1), "cpu": round(fc, 1)}, {"wall": round(sw, 1), "cpu": round(sc, 1)}
        per_change[label] = {"rounds_redecided": visited, "needs_rerun": report.totals()["needs_rerun"],
                             "replay_ms": fast_ms, "scalar_ms": scalar_ms, "speedup_wall": ratio(sw, fw, 1)}

    # Garbage collection share: the same replays with the collector off.
    gc_off = []
    gc.collect()
    gc.disable()
    try:
        for changes in CHANGES.values():
            gc_off.append(statistics.median(timed(lambda c=changes: big.replay(**c))[1] for _ in range(3)))
    finally:
        gc.enable()

    # Re-running the graph on the same questions at the new thresholds.
    from crag_lab import Lab

    lab = Lab.from_directory(KB, remote=False)
    source = [r for r in recorded.records if r.get("rounds")]
    n_rerun = 3 if args.quick else 6
    sample = source[:: max(1, len(source) // n_rerun)][:n_rerun]
    lab.ask(sample[0]["query"])  # warm
    new_config = big.config.model_copy(update=CHANGES["relevance_floor=0.4"])
    rerun_ms, replay_one_ms = [], []
    for n, rec in enumerate(sample):
        single = type(big)(big.config, [rec])  # a new experiment: its first replay compiles it
        pair = [("rerun", lambda q=rec["query"]: rerun_ms.append(lab.ask(q, config=new_config).latency_ms)),
                ("replay", lambda s=single: replay_one_ms.append(timed(lambda: s.replay(new_config))[0]))]
        for _name, fn in pair if n % 2 == 0 else reversed(pair):
            fn()
    mean_rerun = statistics.fmean(rerun_ms)
    replay_headline = statistics.median(fast_wall)
    replay_ms = {"wall_median": round(replay_headline, 1), "cpu_median": round(statistics.median(fast_cpu), 1),
                 "cpu_gc_off_median": round(statistics.median(gc_off), 1), "compile": compile_ms}
    scalar_ms = {"wall_median": round(statistics.median(scalar_wall), 1),
                 "cpu_median": round(statistics.median(scalar_cpu), 1)}
    result = {
        "quick": args.quick,
        "load_average": load_average(),
        "source": {"records": len(recorded.records), "with_rounds": len(source),
                   "model_failures": grader_failures(recorded.records)},
        "replicated": {"records": len(big.records), "rounds": n_rounds, "items": n_items},
        "recorded_thresholds_flip_nothing": same["decisions_flipped"] == 0 and same["queries_changed"] == 0,
        "replay_ms": replay_ms,
        "scalar_ms": scalar_ms,
        "speedup_over_scalar_cpu": ratio(scalar_ms["cpu_median"], replay_ms["cpu_median"], 1),
        "equal_to_scalar": f"{equal}/{len(configs)}",
        "equal_all": equal == len(configs),
        "per_change": per_change,
        "profile_replay": profile_replay(big, CHANGES["generate_threshold=0.6"], "vectorised"),
        "profile_scalar": profile_replay(big, CHANGES["generate_threshold=0.6"], "scalar"),
        "rerun": {"questions": len(sample), "graph_ms_per_query": summary(rerun_ms, 1),
                  "replay_ms_per_query": summary(replay_one_ms, 3),
                  "estimated_graph_s_for_replicated_set": round(mean_rerun * len(big.records) / 1000, 1),
                  "replay_vs_rerun_speedup": ratio(mean_rerun * len(big.records), replay_headline, 0),
                  "per_query_speedup": ratio(statistics.median(rerun_ms), statistics.median(replay_one_ms), 0)},
        # Judged on CPU time: equal to wall time for this single-threaded code on an idle machine, and
        # unaffected by other processes on a busy one (the wall medians are reported too).
        "targets": {"replay_le_50ms": replay_ms["cpu_median"] <= 50, "equal_to_scalar": equal == len(configs)},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
