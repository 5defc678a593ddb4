"""Shared helpers of the benchmarks: paths, statistics, the machine, child processes, JSON output.

Every benchmark is a script (``bench/bench_*.py``) that `run_all.py` starts in its own process, so
that each one starts cold, its peak RSS is its own (``os.wait4``) and a crash in one does not hide
the others. A script run by hand prints its result; ``--json PATH`` writes it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KB = ROOT / "data" / "kb"
QUERIES = ROOT / "data" / "kb_queries.jsonl"
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"
SCRATCH = ROOT / ".cache" / "bench"  # git-ignored: recorded runs, vectors, temporary knowledge bases
RUNS = SCRATCH / "runs"
PYTHON = sys.executable
RUNS.mkdir(parents=True, exist_ok=True)

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
for _key, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_key, _value)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PACKAGES = ("langgraph", "llama-index-core", "llama-index-vector-stores-faiss", "faiss-cpu", "torch",
            "sentence-transformers", "transformers", "numpy", "psutil")


# ---- statistics ------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100), linear between closest ranks (numpy's default); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: Iterable[float], digits: int = 3) -> dict[str, Any]:
    """n, mean, median, p95, min and max of ``values`` (None for an empty list)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"n": 0, "mean": None, "median": None, "p95": None, "min": None, "max": None}

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, digits)

    return {"n": len(vals), "mean": r(statistics.fmean(vals)), "median": r(statistics.median(vals)),
            "p95": r(percentile(vals, 95)), "min": r(min(vals)), "max": r(max(vals))}


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    """a / b rounded, None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, digits)


# ---- the machine ----------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """CPU, cores, RAM, OS, load, Python and the versions of the packages that matter."""
    import psutil

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        import torch

        torch_threads: int | None = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        torch_threads = None
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "torch_threads": torch_threads,
        "versions": versions,
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---- child processes ------------------------------------------------------------------------------


@dataclass
class ChildResult:
    returncode: int
    wall_s: float
    cpu_s: float  # user + system CPU seconds of the child (and the children it waited for)
    peak_rss_mib: float
    output: str


def run_child(cmd: Sequence[str], *, timeout_s: float = 1800, env: Mapping[str, str] | None = None,
              cwd: Path = ROOT, echo: bool = False) -> ChildResult:
    """Run ``cmd`` and return its exit code, wall time, peak RSS (its own, via ``os.wait4``) and output.

    ``ru_maxrss`` of ``wait4`` is the high-water mark of that child (and of the children it waited
    for), not of this process: each measurement is isolated.
    """
    full_env = {**os.environ, **OFFLINE_ENV, **(env or {})}
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=None if echo else log, stderr=subprocess.STDOUT if not echo
                                else None, cwd=cwd, env=full_env)
        deadline = start + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    return ChildResult(proc.returncode, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, output)


# ---- queries and the lab ------------------------------------------------------------------------------


def load_rows(limit: int | None = None) -> list[dict[str, Any]]:
    """The labelled questions of ``data/kb_queries.jsonl`` (the first ``limit``)."""
    rows = [json.loads(line) for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]
    return rows[:limit] if limit else rows


def stratified(rows: Sequence[Mapping[str, Any]], n: int) -> list[Mapping[str, Any]]:
    """About ``n`` rows keeping the labelled complexity mix (every k-th row of each class, in order)."""
    if n >= len(rows):
        return list(rows)
    step = len(rows) / n
    return [rows[int(i * step)] for i in range(n)]


def grader_failures(records: Iterable[Mapping[str, Any]]) -> int:
    """Model calls that failed every attempt in recorded runs (a broken grader invalidates the numbers)."""
    return sum(int(r.get("audit_events", {}).get("model_failed", 0)) for r in records)


# ---- output -------------------------------------------------------------------------------------------


def parse_args(description: str, argv: Sequence[str] | None = None,
               extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--json", dest="json_out", help="write the result as JSON here")
    parser.add_argument("--quick", action="store_true", help="fewer queries and repeats (to debug the bench)")
    if extra:
        extra(parser)
    return parser.parse_args(argv)


def emit(result: Mapping[str, Any], json_out: str | None) -> None:
    """Write ``result`` as JSON to ``json_out``, or print it."""
    text = json.dumps(result, indent=2, ensure_ascii=False, default=str)
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)


def publish(out: Path, text: str, result: Mapping[str, Any], *, write: bool = True) -> None:
    """A study's report: its Markdown printed, and (unless ``write`` is false) kept as ``out`` beside ``out``'s .json."""
    print(text)
    if write:
        out.write_text(text, encoding="utf-8")
        out.with_suffix(".json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def log(message: str) -> None:
    """Progress to stderr with a timestamp (stdout is kept for results)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
