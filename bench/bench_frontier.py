"""Frontier speed: replay the 140-question KB recording at more than 8,000 threshold settings at once.

``frontier`` (numpy over settings, `crag_lab.replay._frontier`) is timed on the recorded run
``notebooks/recordings/kb_knowledge_base.jsonl`` over a grid of relevance_floor × generate_threshold ×
vector_score_threshold × auto_approve_max_items × aggregator, beside the scalar reference
(`scalar_query`: `replay_record` plus the gold counts, query by query) looped over a seeded sample
of the same settings in the same run and extrapolated to the whole grid. Both are checked equal on
the sample.

    .venv/bin/python bench/bench_frontier.py [--quick] [--json out.json]

Result keys: ``settings``, ``frontier_s`` (wall and CPU), ``scalar_s_extrapolated``, ``speedup``,
``equal_on_sample``, ``pareto_points``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from _common import ROOT, emit, load_average, log, parse_args, ratio

RECORDING = ROOT / "notebooks" / "recordings" / "kb_knowledge_base.jsonl"
GRID: dict[str, Any] = {
    "relevance_floor": [round(x, 2) for x in np.arange(0.0, 0.701, 0.05)],
    "generate_threshold": [round(x, 2) for x in np.arange(0.3, 1.001, 0.05)],
    "vector_score_threshold": [round(x, 2) for x in np.arange(0.6, 1.001, 0.05)],
    "auto_approve_max_items": [1, 2, 3],
    "aggregator": ["mean", "max"],
}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv)
    from crag_lab.replay import Experiment
    from crag_lab.replay._frontier import FIELDS, item_flags, scalar_query

    exp = Experiment.load(RECORDING)
    w, c = time.perf_counter(), time.process_time()
    front = exp.frontier(**GRID)
    table = front.table()
    pareto = front.pareto()
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    n = len(front)
    log(f"frontier: {n} settings x {len(exp)} questions in {wall:.2f} s wall, {cpu:.2f} s CPU")

    sample = np.random.default_rng(0).choice(n, 5 if args.quick else 20, replace=False).tolist()
    flags = [item_flags(r, r.get("labels")) for r in exp.records]
    equal = 0
    sw, sc = time.perf_counter(), time.process_time()
    rows = {s: [scalar_query(r, front.settings.config(exp.config, s), f) for r, f in zip(exp.records, flags, strict=True)]
            for s in sample}
    scalar_wall, scalar_cpu = time.perf_counter() - sw, time.process_time() - sc
    for s, per in rows.items():
        equal += all({k: int(front.per_query[k][s, q]) for k in FIELDS} == row for q, row in enumerate(per))
    per_setting = scalar_wall / len(sample)
    log(f"scalar reference: {per_setting * 1000:.1f} ms per setting, {per_setting * n:.1f} s extrapolated; "
        f"equal on {equal}/{len(sample)} sampled settings")
    result = {
        "quick": args.quick,
        "load_average": load_average(),
        "recording": str(RECORDING.relative_to(ROOT)),
        "questions": len(exp),
        "settings": n,
        "frontier_s": {"wall": round(wall, 3), "cpu": round(cpu, 3)},
        "per_setting_ms": round(wall / n * 1000, 4),
        "scalar_sample": {"settings": len(sample), "wall_s": round(scalar_wall, 3), "cpu_s": round(scalar_cpu, 3)},
        "scalar_s_extrapolated": round(per_setting * n, 1),
        "speedup": ratio(per_setting * n, wall, 1),
        "equal_on_sample": f"{equal}/{len(sample)}",
        "pareto_points": len(pareto),
        "best_gold_f1": round(float(table["gold_f1"].max()), 3),
    }
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
