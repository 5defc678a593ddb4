"""Offline latency per question: the default model now against the one before issue #12, side by side.

The "before" engine is the commit before the offline-model redesign (``BEFORE``), checked out with
``git worktree`` into ``.cache/bench/before`` and imported from there in a child process; "now" is
this checkout, measured twice, each in its own process on its own fresh index folder:

- ``now_cold``: nothing encoded yet beyond the index itself — a first session on a new knowledge
  base, where every chunk a question meets has its sentences encoded (and stored) the first time;
- ``now_prepared``: after ``Lab.prepare()``, the state of any later session on the same index: only
  questions and planned searches are encoded.

The index is built once and ``Lab.prepare()`` run once on a copy of it (in a fresh process, timed
and reported as ``prepare_s``); each engine's folder is a fresh copy of the one it needs (index
folders hold relative names only), so no engine pays for a build or a prepare that is not what it
measures.

The three engines run at once as three processes (each loads its models and answers a warm-up
question first), and answer the same labelled KB questions one at a time, question by question:
each question goes to all three in turn, the order rotating from question to question, while the
other two wait. A change in the machine's load meets all three alike. Each process times its own
``lab.ask``. Reported: p50 / p95 per question overall and per labelled complexity, and the ratios to
"before".

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
lab = Lab.from_directory(sys.argv[2], remote=False, **({"cache_dir": sys.argv[3]} if sys.argv[3] != "-" else {}))
lab.ask("warm-up: which port?")  # loads the models once, like any session's first question
print("@@ready", flush=True)
for line in sys.stdin:
    row = json.loads(line)
    start = time.perf_counter()
    result = lab.ask(row["question"])
    ms = (time.perf_counter() - start) * 1000
    print("@@" + json.dumps({"id": row["id"], "complexity": row["complexity"], "route": result.route, "ms": ms}),
          flush=True)
"""
"""One engine's process: ``@@ready`` once its models are loaded, then one ``@@`` line per question on stdin."""

SEED = r"""
import json, shutil, sys, time
from crag_lab import Lab
Lab.from_directory(sys.argv[1], remote=False, cache_dir=sys.argv[2])  # builds the index
shutil.copytree(sys.argv[2], sys.argv[3])
lab = Lab.from_directory(sys.argv[1], remote=False, cache_dir=sys.argv[3])
start = time.perf_counter()
texts = lab.prepare()
print(json.dumps({"prepare_s": time.perf_counter() - start, "texts_encoded": texts}))
"""


def worktree(commit: str) -> Path:
    path = SCRATCH / "before"
    if not (path / "crag_lab").is_dir():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--force", "--detach", str(path), commit],
                       check=True, capture_output=True)
    return path


ENGINES = ("before", "now_cold", "now_prepared")
SEEDS = {"now_cold": SCRATCH / "latency-seed-index", "now_prepared": SCRATCH / "latency-seed-prepared"}
"""What each of this checkout's runs starts from: the index alone, and the index after ``Lab.prepare()``."""


def seed() -> dict[str, Any]:
    """Build the index and prepare a copy of it (`SEEDS`), in a fresh process: prepare's seconds and texts."""
    for folder in SEEDS.values():
        shutil.rmtree(folder, ignore_errors=True)
    child = subprocess.run([PYTHON, "-c", SEED, str(ROOT / "data" / "kb"), str(SEEDS["now_cold"]),
                            str(SEEDS["now_prepared"])], capture_output=True, text=True, check=True, cwd=ROOT)
    return dict(json.loads(child.stdout.strip().splitlines()[-1]))


def start(engine: str, source: Path) -> subprocess.Popen[str]:
    """``engine``'s process (`CHILD`), on a fresh copy of its seed folder for this checkout's engines."""
    cache_dir = "-"
    if engine != "before":
        folder = SCRATCH / f"latency-{engine}"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(SEEDS[engine], folder)
        cache_dir = str(folder)
    return subprocess.Popen([PYTHON, "-c", CHILD, str(source), str(ROOT / "data" / "kb"), cache_dir], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def reply(engine: str, child: subprocess.Popen[str]) -> str:
    """The next ``@@`` line ``child`` prints (anything else a library prints is passed over)."""
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("@@"):
            return line[2:].strip()
    raise RuntimeError(f"latency: the {engine} engine's process ended (exit {child.wait()}); its errors are above")


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
    log("building the index once and preparing a copy of it")
    prepared = seed()
    rows = [json.loads(line) for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()][:n]
    children = {engine: start(engine, before_src if engine == "before" else ROOT) for engine in ENGINES}
    runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in ENGINES}
    try:
        for engine, child in children.items():
            reply(engine, child)  # loaded and warm
        log(f"{len(rows)} questions, each to the three engines in turn")
        for i, row in enumerate(rows):
            for engine in ENGINES[i % 3:] + ENGINES[:i % 3]:
                child = children[engine]
                assert child.stdin is not None
                child.stdin.write(json.dumps(row) + "\n")
                child.stdin.flush()
                runs[engine].append(json.loads(reply(engine, child)))
    finally:
        for child in children.values():
            if child.stdin is not None:
                child.stdin.close()
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
    result: dict[str, Any] = {"before_commit": BEFORE, "questions": n, "order": "rotating per question",
                              "prepare_s": [round(float(prepared["prepare_s"]), 1)],
                              "prepare_texts_encoded": prepared["texts_encoded"],
                              **{engine: stats(runs[engine]) for engine in ENGINES}}
    for engine in ENGINES[1:]:
        result[f"ratio_p50_{engine}"] = {k: round(result[engine][k]["p50_ms"] / result["before"][k]["p50_ms"], 3)
                                         for k in ("all", "simple", "complex") if result["before"][k]["p50_ms"]}
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
