"""Run every benchmark, each in its own process, and write bench/results.json and bench/RESULTS.md.

    make bench                                   # = .venv/bin/python bench/run_all.py
    .venv/bin/python bench/run_all.py --only replay,overhead
    .venv/bin/python bench/run_all.py --quick    # fewer queries and repeats, to debug the benchmarks

A benchmark that fails is reported as failed (with the end of its output) and the others still run.
Absolute times depend on the machine and on its load; the ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import PYTHON, ROOT, RUNS, SCRATCH, load_average, log, machine, run_child

BENCH = Path(__file__).resolve().parent
# Order matters: calls reuses the 100-question run that memory records (the same questions at the same
# config, deterministic), and replay the knowledge_base run that calls records.
BENCHMARKS = ("memory", "calls", "replay", "overhead", "index", "scale", "latency", "frontier", "scaleout", "realmodel",
              "export", "regrade", "batching")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="fewer queries and repeats (debugging only)")
    parser.add_argument("--out", default=str(BENCH), help="folder for results.json and RESULTS.md (default bench/)")
    args = parser.parse_args(argv)
    chosen = [b.strip() for b in args.only.split(",")] if args.only else list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    command = "make bench" if os.environ.get("MAKELEVEL") else "python bench/run_all.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    out_dir = Path(args.out)
    results: dict[str, Any] = {
        "command": command.strip(),
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": machine(),
        "benchmarks": {},
        "runs": {},
    }
    started = time.perf_counter()
    for name in BENCHMARKS:
        if name not in chosen:
            continue
        json_out = SCRATCH / "results" / f"{name}.json"
        json_out.unlink(missing_ok=True)
        cmd = [PYTHON, str(BENCH / f"bench_{name}.py"), "--json", str(json_out), *(["--quick"] if args.quick else [])]
        if name == "calls" and results["runs"].get("memory", {}).get("ok"):
            cmd += ["--prefix-run", str(RUNS / "memory-100.jsonl")]
        log(f"== {name}: {' '.join(Path(c).name if i < 2 else c for i, c in enumerate(cmd))}")
        load_before = load_average()
        child = run_child(cmd, timeout_s=3600, echo=True)
        run = {"ok": child.returncode == 0 and json_out.is_file(), "returncode": child.returncode,
               "wall_s": round(child.wall_s, 1), "cpu_s": round(child.cpu_s, 1),
               "peak_rss_mib": round(child.peak_rss_mib, 1),
               "load_average_before": load_before, "load_average_after": load_average()}
        results["runs"][name] = run
        if run["ok"]:
            results["benchmarks"][name] = json.loads(json_out.read_text(encoding="utf-8"))
        log(f"== {name}: {'ok' if run['ok'] else 'FAILED'} in {run['wall_s']} s")
    results["total_wall_s"] = round(time.perf_counter() - started, 1)
    results["load_average_end"] = load_average()
    if set(chosen) != set(BENCHMARKS):
        previous = out_dir / "results.json"
        if previous.is_file():  # keep the other benchmarks' last results
            old = json.loads(previous.read_text(encoding="utf-8"))
            for name, value in old.get("benchmarks", {}).items():
                if name not in results["benchmarks"]:
                    results["benchmarks"][name] = value
                    results["runs"].setdefault(name, {**old.get("runs", {}).get(name, {}), "from_previous_run": True})
    from _report import render

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False, default=str) + "\n",
                                          encoding="utf-8")
    (out_dir / "RESULTS.md").write_text(render(results), encoding="utf-8")
    log(f"wrote {out_dir / 'results.json'} and {out_dir / 'RESULTS.md'} ({results['total_wall_s']} s)")
    return 0 if all(r["ok"] for r in results["runs"].values()) else 1


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
