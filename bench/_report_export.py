"""RESULTS.md section 11: exporting a recorded run as OpenTelemetry / OpenInference traces (issue #34)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _report_fmt import against, f, pct, table

WAYS = {"memory": "spans only (`InMemorySpanExporter`)", "file": "OTLP/JSON lines (`--file`)",
        "otlp": "OTLP/HTTP to 127.0.0.1 (`--otlp`)", "replayed_file": "replayed at relevance_floor=0.4, to a file"}


def headline_export(ex: Mapping[str, Any]) -> list[str]:
    """The headline row: the slowest way to export, as a share of the run."""
    worst = max(ex["ratio"], key=lambda k: ex["ratio"][k] or 0)
    return ["11", "exporting the 140-question recording ≤ 5 % of the run (issue #34)",
            f"{pct(ex['ratio'][worst], 2)} at most ({WAYS[worst]}: {f(ex['export_ms'][worst]['wall_median'], 0)} ms "
            f"for {f(ex['spans'])} spans; the run took {f(ex['run_ms'] / 1000, 1)} s)",
            against(100 * ex["worst_ratio"], 100 * ex["target_ratio"], digits=2, unit=" %")]


def section_export(ex: Mapping[str, Any]) -> str:
    out = ["## 11. Exporting traces (OpenInference)\n",
           f"`bench/bench_export.py`: `Experiment.to_otel` turns `{ex['recording']}` ({ex['questions']} questions, "
           f"{f(ex['spans'])} spans) into one trace per question; each way {ex['repeats']}× interleaved, medians of "
           f"this process's wall and CPU time. The run's time is the recording's own: the questions' `latency_ms` "
           f"added up, **{f(ex['run_ms'] / 1000, 2)} s** (offline model, prepared index; a real model's run is "
           "longer, so the share is smaller). Load average "
           f"{ex['load_average_before'][0]} → {ex['load_average_after'][0]}.\n"]
    out.append(table(["way", "wall ms (median)", "CPU ms (median)", "wall min–max", "share of the run"],
                     [[WAYS[k], f(m["wall_median"], 1), f(m["cpu_median"], 1), f"{f(m['wall_min'], 0)}–{f(m['wall_max'], 0)}",
                       pct(ex["ratio"][k], 2)] for k, m in ex["export_ms"].items()]))
    out.append(f"\nSizes: OTLP/JSON file {f(ex['bytes']['file'] / 2**20, 1)} MiB, OTLP protobuf sent "
               f"{f(ex['bytes']['otlp_protobuf'] / 2**20, 1)} MiB. Target ≤ {pct(ex['target_ratio'], 0)} of the run.\n")
    return "\n".join(out)
