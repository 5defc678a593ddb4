"""Offline latency per question: the default model now against the one before issue #12, side by side.

The "before" engine is the commit before the offline-model redesign (``BEFORE``), checked out with
``git worktree`` into ``.cache/bench/before`` and imported from there in a child process; "now" is
this checkout. Both answer the same labelled KB questions, one at a time, in a fresh process
(the embedding model loaded, the index loaded, nothing else warm), alternating which goes first
over two halves of the questions (so each answers every question once). Reported: p50 / p95 per
question overall and per route, and the ratio.

    .venv/bin/python bench/bench_latency.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
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
lab = Lab.from_directory(sys.argv[2], remote=False)
rows = [json.loads(l) for l in open(sys.argv[3], encoding="utf-8") if l.strip()][: int(sys.argv[4])]
rows = rows[int(sys.argv[5])::2]
lab.ask("warm-up: which port?")  # loads MiniLM once, like any session's first question
out = []
for row in rows:
    start = time.perf_counter()
    result = lab.ask(row["question"])
    out.append({"id": row["id"], "complexity": row["complexity"], "route": result.route,
                "ms": (time.perf_counter() - start) * 1000})
print(json.dumps(out))
"""


def worktree(commit: str) -> Path:
    path = SCRATCH / "before"
    if not (path / "crag_lab").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--force", "--detach", str(path), commit],
                       check=True, capture_output=True)
    return path


def measure(source: Path, n: int, half: int) -> list[dict[str, Any]]:
    """Latencies of every other question (``half`` 0: even, 1: odd) of the first ``n``."""
    child = subprocess.run([PYTHON, "-c", CHILD, str(source), str(ROOT / "data" / "kb"), str(QUERIES), str(n),
                            str(half)],
                           capture_output=True, text=True, check=True, cwd=ROOT)
    return list(json.loads(child.stdout.strip().splitlines()[-1]))


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
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "now": []}
    for half, order in enumerate((("before", "now"), ("now", "before"))):  # each engine answers every question once
        for label in order:
            log(f"{label}: half {half} of {n} questions")
            runs[label] += measure(before_src if label == "before" else ROOT, n, half)
    result = {"before_commit": BEFORE, "questions": n, "rounds": 2,
              "before": stats(runs["before"]), "now": stats(runs["now"])}
    result["ratio_p50"] = {k: round(result["now"][k]["p50_ms"] / result["before"][k]["p50_ms"], 3)
                           for k in ("all", "simple", "complex") if result["before"][k]["p50_ms"]}
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
