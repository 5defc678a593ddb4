"""A real model server: tokens/s, seconds per question, a cached re-run, and concurrency 1 against 4.

llama.cpp's server with Gemma 3 270M (the realmodel extra; skipped, saying why, without it), started
with four slots (``--parallel 4``) and its Prometheus counters (``--metrics``), answers a stratified
sample of ``data/kb_queries.jsonl`` through `crag_lab.models.LlamaIndexModel` (OpenAILike on
``/completions``, schema-constrained JSON where the node has a schema), ``CragConfig(top_k=3,
max_iterations=1, routing=False)`` (the model still classifies each question, but no question takes the
chitchat or simple shortcut: each is planned, and what its plan retrieves is graded and
synthesized), three times:

- ``cold``: one question at a time, with an empty response cache (`Lab(..., cache=...)`), which
  it fills;
- ``rerun``: the same questions with that cache: every call should be a hit (goal: 100 % hits,
  0 model calls) and every record equal to the cold run's, latencies aside;
- ``concurrent``: four at a time (``concurrency=4``, one request per slot), with no cache.

Per run: wall seconds and seconds per question, model calls and cache hits, and the server's own
prompt and generation tokens/s over the run (``llamacpp:prompt_tokens_total`` /
``prompt_seconds_total`` and ``tokens_predicted_total`` / ``tokens_predicted_seconds_total``,
read before and after; their seconds are summed over slots, so under concurrency they are per
slot). The server keeps each slot's last prompt and reads only what differs from it: the prompt
tokens it *reused* (``prompt_tokens_cached_total``) are counted apart and cost no time. The
server and the lab share the machine's cores; the ratio concurrent / cold in questions/s is
measured side by side on the same server.

    .venv/bin/python bench/bench_realmodel.py [--quick] [--json out.json]

Result keys: ``runs`` (per run as above), ``ratios``, ``rerun_equal``, ``server``, ``model``,
``questions`` (or ``skipped``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from _common import KB, SCRATCH, emit, load_average, load_rows, log, parse_args, ratio, stratified
from bench_scaleout import comparable, realmodel_missing

QUESTIONS = 8
SLOTS = 4
METRICS = ("prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total", "tokens_predicted_total",
           "tokens_predicted_seconds_total")


def server_counters(base_url: str) -> dict[str, float]:
    """The llama.cpp server's token and time counters (``GET /metrics``, Prometheus text)."""
    import httpx

    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=30).text
    found = dict(re.findall(r"^llamacpp:(\w+) ([0-9.eE+-]+)$", text, flags=re.M))
    return {name: float(found.get(name, "nan")) for name in METRICS}


def measured(exp: Any, seconds: float, before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, Any]:
    usage = [u for r in exp.records for u in r["usage"]]
    calls = [u for u in usage if not u.get("cached")]
    delta = {k: after[k] - before[k] for k in METRICS}
    n = len(exp.records)
    return {
        "questions": n, "wall_s": round(seconds, 2), "s_per_question": round(seconds / n, 2),
        "questions_per_s": round(n / seconds, 4), "model_calls": len(calls), "cache_hits": len(usage) - len(calls),
        "cache_hit_rate": round((len(usage) - len(calls)) / len(usage), 4) if usage else None,
        "calls_per_question": round(len(usage) / n, 2),
        "calls_by_task": {t: sum(1 for u in usage if u["task"] == t) for t in ("analyze", "plan", "grade", "synthesize")},
        "failed_calls": sum(1 for u in calls if not u["ok"]),
        "prompt_tokens": int(delta["prompt_tokens_total"]),
        "prompt_tokens_reused": int(delta["prompt_tokens_cached_total"]),
        "generated_tokens": int(delta["tokens_predicted_total"]),
        "prompt_tokens_per_s": ratio(delta["prompt_tokens_total"], delta["prompt_seconds_total"], 1),
        "generation_tokens_per_s": ratio(delta["tokens_predicted_total"], delta["tokens_predicted_seconds_total"], 1),
    }


def run_server(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    missing = realmodel_missing()
    if missing is not None:
        log(f"real model: skipped: {missing}")
        return {"skipped": missing}
    from crag_lab import CragConfig, Lab
    from crag_lab.models import LlamaIndexModel
    from crag_lab.servers import GEMMA_ID, openai_compatible, start_llama_server

    # No routing shortcut: Gemma 3 270M calls nearly every question chitchat (docs/evaluation.md), which
    # would end most questions after two short calls; every question takes the graded path instead.
    config = CragConfig(top_k=3, max_iterations=1, routing=False, model_timeout_s=300, model_retries=1)
    cache = SCRATCH / "realmodel_responses.sqlite"
    for stale in SCRATCH.glob("realmodel_responses.sqlite*"):
        stale.unlink()
    started = time.perf_counter()
    server = start_llama_server(threads=2, parallel=SLOTS, context=SLOTS * 3072, extra_args=["--metrics"],
                                log_path=SCRATCH / "realmodel_llama.log")
    server_start_s = round(time.perf_counter() - started, 2)
    runs: dict[str, Any] = {}
    records: dict[str, list[dict[str, Any]]] = {}
    try:
        def lab(with_cache: bool) -> Any:
            model = LlamaIndexModel(openai_compatible(server.url, GEMMA_ID, chat=False, timeout_s=300, max_tokens=200))
            return Lab.from_directory(KB, config=config, llm=model, remote=False, cache=cache if with_cache else None)

        lab(False).ask("Hello!")  # the server's first request and the lab's model loading are not a run's
        cached_lab = lab(True)
        for name, target, concurrency in (("cold", cached_lab, 1), ("rerun", cached_lab, 1),
                                          ("concurrent", lab(False), SLOTS)):
            log(f"real model: {name}: {len(rows)} questions, concurrency {concurrency}")
            before = server_counters(server.url)
            started = time.perf_counter()
            exp = target.run(rows, concurrency=concurrency)
            seconds = time.perf_counter() - started
            runs[name] = {"concurrency": concurrency, **measured(exp, seconds, before, server_counters(server.url))}
            records[name] = [comparable(r) for r in exp.records]
            log(f"real model: {name}: {runs[name]}")
    finally:
        server.stop()
    return {"model": GEMMA_ID, "server": f"llama.cpp llama-server, --parallel {SLOTS}, --threads 2, --metrics",
            "config": {"top_k": 3, "max_iterations": 1, "routing": False, "max_tokens": 200}, "questions": len(rows),
            "server_start_s": server_start_s, "runs": runs,
            "rerun_equal": records["rerun"] == records["cold"],
            "concurrent_equal": records["concurrent"] == records["cold"],
            "ratios": {"concurrent_over_cold": ratio(runs["concurrent"]["questions_per_s"],
                                                     runs["cold"]["questions_per_s"]),
                       "rerun_over_cold": ratio(runs["rerun"]["questions_per_s"], runs["cold"]["questions_per_s"])}}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv)
    rows = [dict(r) for r in stratified(load_rows(), 2 if args.quick else QUESTIONS)]
    result: dict[str, Any] = {"kb": str(KB.relative_to(KB.parents[1])), "cpus": os.cpu_count(),
                              "load_average_before": load_average()}
    result |= run_server(rows)
    result["load_average_after"] = load_average()
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
