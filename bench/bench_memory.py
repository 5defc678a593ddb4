"""Peak memory (RSS high-water mark) of ``crag-lab demo`` and of a 100-query experiment.

Each workload runs in its own process; its peak RSS is the ``ru_maxrss`` that ``os.wait4`` reports
for that child alone. A baseline child only builds the `Lab` (imports, index, embedding model), so
the cost of the queries themselves shows as the difference.

    .venv/bin/python bench/bench_memory.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import KB, PYTHON, QUERIES, ROOT, RUNS, emit, log, parse_args, run_child


def rss_mib() -> float:
    import psutil

    return round(psutil.Process().memory_info().rss / 2**20, 1)


def child(n_queries: int) -> dict[str, Any]:
    """Build the lab, then (if ``n_queries``) run the first questions as one experiment."""
    t0 = time.perf_counter()
    from crag_lab import Lab
    from crag_lab.eval import load_kb_queries

    lab = Lab.from_directory(KB, remote=False)
    out: dict[str, Any] = {"lab_s": round(time.perf_counter() - t0, 2), "rss_after_lab_mib": rss_mib()}
    if n_queries:
        samples: list[float] = []
        done = threading.Event()

        def sample() -> None:  # RSS every 0.25 s: does memory plateau or keep growing with queries?
            while not done.wait(0.25):
                samples.append(rss_mib())

        sampler = threading.Thread(target=sample, daemon=True)
        t1 = time.perf_counter()
        sampler.start()
        # The same rows as bench_calls.py (the evaluation's), so that it can reuse this run's records.
        exp = lab.run(load_kb_queries(QUERIES, kb=KB).rows()[:n_queries])
        done.set()
        sampler.join()
        quarters = [samples[min(len(samples) - 1, int(len(samples) * q / 4))] for q in (1, 2, 3, 4)] if samples else []
        run_s = round(time.perf_counter() - t1, 2)
        out.update(run_s=run_s, rss_after_run_mib=rss_mib(), records=len(exp.records),
                   rss_at_run_quarters_mib=quarters)
        exp.meta.update(eval_mode="knowledge_base", wall_s=run_s)
        exp.save(RUNS / f"memory-{n_queries}.jsonl")
    return out


def extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)


def measure(cmd: list[str], what: str) -> dict[str, Any]:
    log(f"memory: {what}")
    proc = run_child(cmd, timeout_s=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.output[-3000:]}")
    shown = [Path(c).name if i == 0 else (str(Path(c).relative_to(ROOT)) if c.startswith(str(ROOT)) else c)
             for i, c in enumerate(cmd)]
    row: dict[str, Any] = {"command": " ".join(shown),
                           "peak_rss_mib": round(proc.peak_rss_mib, 1), "wall_s": round(proc.wall_s, 2)}
    last = proc.output.strip().splitlines()[-1] if proc.output.strip() else ""
    if last.startswith("{"):
        row.update(json.loads(last))
    return row


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv, extra)
    if args.child is not None:
        result = child(args.child)
        print(json.dumps(result))
        return result
    started = time.perf_counter()
    n = 30 if args.quick else 100
    crag_lab_cli = str(Path(PYTHON).with_name("crag-lab"))
    results = {
        "baseline_lab_only": measure([PYTHON, __file__, "--child", "0"], "Lab.from_directory only"),
        "demo": measure([crag_lab_cli, "demo", "--kb", str(KB.relative_to(ROOT)), "--queries",
                         str(QUERIES.relative_to(ROOT))], "crag-lab demo"),
        f"experiment_{n}": measure([PYTHON, __file__, "--child", str(n)], f"lab.run(first {n} queries)"),
    }
    base = results["baseline_lab_only"]["peak_rss_mib"]
    result = {"quick": args.quick, **results,
              "queries_cost_mib": round(results[f"experiment_{n}"]["peak_rss_mib"] - base, 1),
              "demo_over_baseline_mib": round(results["demo"]["peak_rss_mib"] - base, 1),
              "wall_s": round(time.perf_counter() - started, 1)}
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
