"""Offline latency per question: the default model now against the one before issue #12, side by side.

The "before" engine is the commit before the offline-model redesign (``BEFORE``), checked out with
``git worktree`` into ``.cache/bench/before`` and imported from there in a child process; "now" is
this checkout, measured twice, each with its own fresh index folder:

- ``now_cold``: nothing encoded yet beyond the index itself — a first session on a new knowledge
  base, where every chunk a question meets has its sentences encoded (and stored) the first time;
- ``now_prepared``: after ``Lab.prepare()`` (timed apart, reported as ``prepare_s``), the state of
  any later session on the same index: only questions and planned searches are encoded.

Each answers the same labelled KB questions, one at a time, in a fresh process (the embedding model
loaded, nothing else warm), alternating the order over two halves of the questions (so each answers
every question once). Reported: p50 / p95 per question overall and per labelled complexity, and the
ratios to "before".

    .venv/bin/python bench/bench_latency.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import PYTHON, QUERIES, ROOT, SCRATCH, emit, log, percentile

BEFORE = "32d3c0e"
"""main before the offline model was redesigned (issue #12)."""

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from crag_lab import Lab
lab = Lab.from_directory(sys.argv[2], remote=False, **({"cache_dir": sys.argv[6]} if sys.argv[6] != "-" else {}))
start = time.perf_counter()
if sys.argv[7] == "prepare":
    lab.prepare()
prepare_s = time.perf_counter() - start
rows = [json.loads(l) for l in open(sys.argv[3], encoding="utf-8") if l.strip()][: int(sys.argv[4])]
rows = rows[int(sys.argv[5])::2]
lab.ask("warm-up: which port?")  # loads MiniLM once, like any session's first question
out = []
for row in rows:
    start = time.perf_counter()
    result = lab.ask(row["question"])
    out.append({"id": row["id"], "complexity": row["complexity"], "route": result.route,
                "ms": (time.perf_counter() - start) * 1000})
print(json.dumps({"rows": out, "prepare_s": prepare_s}))
"""


def worktree(commit: str) -> Path:
    path = SCRATCH / "before"
    if not (path / "crag_lab").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--force", "--detach", str(path), commit],
                       check=True, capture_output=True)
    return path


ENGINES = ("before", "now_cold", "now_prepared")


def measure(engine: str, source: Path, n: int, half: int) -> dict[str, Any]:
    """Latencies of every other question (``half`` 0: even, 1: odd) of the first ``n``, and prepare seconds."""
    cache_dir = "-"
    if engine != "before":  # a fresh index folder per run: nothing encoded but the index
        folder = SCRATCH / f"latency-{engine}-{half}"
        shutil.rmtree(folder, ignore_errors=True)
        cache_dir = str(folder)
    child = subprocess.run([PYTHON, "-c", CHILD, str(source), str(ROOT / "data" / "kb"), str(QUERIES), str(n),
                            str(half), cache_dir, "prepare" if engine == "now_prepared" else "-"],
                           capture_output=True, text=True, check=True, cwd=ROOT)
    return dict(json.loads(child.stdout.strip().splitlines()[-1]))


def stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def p(sel: list[float], q: float) -> float | None:
        value = percentile(sel, q)
        return None if value is None else round(value, 1)

    by = {"all": [r["ms"] for r in rows if r["complexity"] != "chitchat"]}
    for kind in ("simple", "complex"):
        by[kind] = [r["ms"] for r in rows if r["complexity"] == kind]
    return {k: {"n": len(v), "p50_ms": p(v, 50), "p95_ms": p(v, 95)} for k, v in by.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    n = 30 if args.quick else 140
    before_src = worktree(BEFORE)
    runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in ENGINES}
    prepare_s: list[float] = []
    for half, order in enumerate((ENGINES, ENGINES[::-1])):  # each engine answers every question once
        for engine in order:
            log(f"{engine}: half {half} of {n} questions")
            out = measure(engine, before_src if engine == "before" else ROOT, n, half)
            runs[engine] += out["rows"]
            if engine == "now_prepared":
                prepare_s.append(round(float(out["prepare_s"]), 1))
    result: dict[str, Any] = {"before_commit": BEFORE, "questions": n, "rounds": 2, "prepare_s": prepare_s,
                              **{engine: stats(runs[engine]) for engine in ENGINES}}
    for engine in ENGINES[1:]:
        result[f"ratio_p50_{engine}"] = {k: round(result[engine][k]["p50_ms"] / result["before"][k]["p50_ms"], 3)
                                         for k in ("all", "simple", "complex") if result["before"][k]["p50_ms"]}
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
