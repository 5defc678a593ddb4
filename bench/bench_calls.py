"""Model calls and tokens per query: crag_lab vs per-item grading vs naive RAG (offline model).

Runs every question of ``data/kb_queries.jsonl`` in the three modes `crag_lab.eval` compares, with
the evaluation's own definitions (`crag_lab.eval.mode_setup`: ``per_item_grading`` is one grader
call per item, no pre-filter, no complexity routing), scores the answers with its metrics, and
checks the worst case against its formula with a scripted model whose grader answers low scores.

    .venv/bin/python bench/bench_calls.py [--quick] [--json out.json]

The questions run in ``--workers`` processes side by side (default 2; one torch thread each, so two
processes use two cores without fighting over them), each mode cut into slices that are merged back
in question order; the outcome of a question does not depend on the thread count. With
``--prefix-run`` the first knowledge_base records come from bench_memory.py's run of the same
questions at the same config. The recorded runs are saved under ``.cache/bench/runs/`` (the replay
benchmark reuses them).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _common import (
    KB,
    PYTHON,
    QUERIES,
    RUNS,
    emit,
    grader_failures,
    log,
    parse_args,
    ratio,
    stratified,
    summary,
)

CLASSES = ("chitchat", "simple", "complex")
QUALITY = ("answer_containment", "abstention_rate", "false_abstention_rate", "citation_precision", "citation_recall",
           "routing_accuracy")


def usage_numbers(record: Mapping[str, Any]) -> dict[str, int]:
    from crag_lab.records import usage_tokens

    usage = record.get("usage", [])
    grade = [u for u in usage if u.get("task") == "grade"]
    return {
        "calls": len(usage),
        "tokens": usage_tokens(usage),
        "grader_calls": len(grade),
        "grader_tokens": usage_tokens(grade),
    }


def per_class(records: Sequence[Mapping[str, Any]], labels: Mapping[str, str | None]) -> dict[str, Any]:
    """Mean, p95 and max of calls, tokens and grader calls/tokens per labelled question class."""
    out: dict[str, Any] = {}
    for cls in (*CLASSES, "all"):
        rows = [usage_numbers(r) for r in records if cls == "all" or labels.get(str(r["id"])) == cls]
        out[cls] = {k: summary([row[k] for row in rows], 2) for k in ("calls", "tokens", "grader_calls",
                                                                       "grader_tokens")}
    return out


def per_item_identity(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-item grading: calls = analyze + plan + (new items graded, one call each) + synthesize, exactly."""
    holds = 0
    max_new = 0
    for rec in records:
        usage = rec.get("usage", [])
        tasks = [u["task"] for u in usage]
        new_items = sum(sum(1 for i in r["items"] if i["new"]) for r in rec.get("rounds", []) if r.get("rule") is None)
        max_new = max([max_new, *(sum(1 for i in r["items"] if i["new"]) for r in rec.get("rounds", []))])
        expected = tasks.count("analyze") + tasks.count("plan") + new_items + tasks.count("synthesize")
        holds += int(expected == len(usage) and tasks.count("grade") == new_items)
    return {"records": len(records), "identity_holds": holds, "max_new_items_in_a_round": max_new}


# ---- the forced worst case ---------------------------------------------------------------------------


def forced_worst_case(max_iterations: int, top_k: int, grading: str, *, last_round_keeps: bool) -> dict[str, Any]:
    """Run one question through the real graph with a scripted model that makes every round fail.

    The grader answers 0.05 for every item (RE_RETRIEVE each round). With ``last_round_keeps`` it
    answers 0.5 in the last round, so that something survives and synthesize calls the model: the
    true worst case. (When nothing survives, synthesize answers NO_EVIDENCE_ANSWER without a call.)
    """
    from crag_lab import CragConfig, Lab
    from crag_lab.eval import mode_setup
    from crag_lab.testing import ScriptedLLM, StaticTool

    m, k = max_iterations, top_k
    batches = [[{"text": f"passage {r}.{i} about nothing in particular", "path": f"r{r}.md", "line": i + 1,
                 "line_end": i + 1, "score": 0.5, "title": f"R{r}"} for i in range(k)] for r in range(m)]
    low, mid = 0.05, 0.5
    if grading == "batch":
        grades: list[str] = [json.dumps([low] * k)] * (m - 1) + [json.dumps([mid if last_round_keeps else low] * k)]
        config = CragConfig(max_iterations=m, top_k=k)
    else:
        grades = [str(low)] * (k * (m - 1)) + [str(mid if last_round_keeps else low)] * k
        config = mode_setup("per_item_grading", CragConfig(max_iterations=m, top_k=k))[1]
    plans = [json.dumps([{"tool": "vector_search", "args": {"query": f"attempt {r}", "top_k": k}}]) for r in range(m)]
    llm = ScriptedLLM({
        "analyze": json.dumps({"complexity": "complex", "suggested_tools": ["vector_search"]}),
        "plan": plans,
        "grade": grades,
        "synthesize": "An answer from what survived [1].",
    })
    lab = Lab([StaticTool("vector_search", batches)], config=config, llm=llm)
    result = lab.ask("A question no passage answers?")
    rounds = result.state.get("rounds", [])
    return {"max_iterations": m, "top_k": k, "grading": grading, "last_round_keeps": last_round_keeps,
            "calls": result.llm_calls, "grader_calls": sum(1 for u in result.usage if u["task"] == "grade"),
            "actions": [r["action"] for r in rounds], "path_len": len(result.path)}


def worst_case_formula(max_iterations: int, top_k: int, grading: str) -> int:
    """Model calls of the worst case: every round is analyze + plan + grading; then synthesize.

    batch: 3·m + 1.  per-item with one search of top_k per round: m·(top_k + 2) + 1.
    """
    m, k = max_iterations, top_k
    return 3 * m + 1 if grading == "batch" else m * (k + 2) + 1


def worst_cases() -> list[dict[str, Any]]:
    rows = []
    for grading in ("batch", "per_item"):
        for m, k in ((1, 5), (2, 5), (3, 3), (3, 5), (3, 8), (5, 5)):
            for keeps in (True, False):
                row = forced_worst_case(m, k, grading, last_round_keeps=keeps)
                row["formula"] = worst_case_formula(m, k, grading)
                # When nothing survives the last round, synthesize answers without a model call.
                row["matches"] = row["calls"] == row["formula"] - (0 if keeps else 1)
                rows.append(row)
    return rows


# ---- the comparison ----------------------------------------------------------------------------------


def reuse_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reuse", action="store_true",
                        help="score the runs saved in .cache/bench/runs/ instead of running the questions again")
    parser.add_argument("--prefix-run", help="a saved knowledge_base run of the first questions (bench_memory.py "
                                             "writes one): only the remaining questions are run, to save time")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes that run the questions side by side, one torch thread each (default: "
                             "2 on a machine with 2 or more cores; 1 runs everything in this process)")
    parser.add_argument("--part", help=argparse.SUPPRESS)  # a worker: JSON list of [mode, start, end]
    parser.add_argument("--part-out", help=argparse.SUPPRESS)


def prefix_records(path: str | None, rows: Sequence[Mapping[str, Any]], config: Any) -> tuple[list[Any], float]:
    """Records of an earlier run of the first ``rows`` at ``config`` (same ids, same config), else none."""
    from crag_lab.replay import Experiment

    if not path or not Path(path).is_file():
        return [], 0.0
    exp = Experiment.load(path)
    ids = [str(r["id"]) for r in exp.records]
    if exp.config != config or ids != [str(r["id"]) for r in rows[: len(ids)]]:
        log(f"calls: {path} is not a run of the first questions at this config; running everything")
        return [], 0.0
    log(f"calls: reusing the first {len(ids)} knowledge_base records from {path}")
    return exp.records, float(exp.meta.get("wall_s") or 0.0)


# Rough seconds per question of each mode (offline model), only to split the work evenly between workers.
COST = {"knowledge_base": 1.8, "naive_rag": 0.8, "per_item_grading": 4.0}


def run_slices(slices: Sequence[tuple[str, int, int]], rows: Sequence[Mapping[str, Any]],
               prefix_run: str | None) -> list[Any]:
    """Run rows[start:end] of each mode in this process; one Experiment per slice (meta: wall_s, reused)."""
    from crag_lab import Lab
    from crag_lab.eval import mode_setup

    lab = Lab.from_directory(KB, remote=False)
    lab.ask("warm-up: which port does the gateway use?")  # loads the embedding model and the grader
    out = []
    for mode, start, end in slices:
        graph_mode, cfg = mode_setup(mode, lab.config)
        done, done_s = (prefix_records(prefix_run, rows, cfg) if mode == "knowledge_base" and start == 0
                        else ([], 0.0))
        done = done[: end - start]
        log(f"calls: {mode} on questions {start + len(done) + 1}-{end}")
        t0 = time.perf_counter()
        exp = lab.run(rows[start + len(done):end], config=cfg, mode=graph_mode, shadow_grading=True)
        exp.records[:0] = done
        exp.meta.update(eval_mode=mode, wall_s=round(time.perf_counter() - t0 + done_s, 2), reused=len(done))
        out.append(exp)
    return out


def plan_slices(n: int, prefix: int, workers: int) -> list[list[tuple[str, int, int]]]:
    """Split the three modes' questions into ``workers`` lists of about equal estimated cost.

    Whole modes go to the first worker in order until it holds its share; per_item_grading (the
    dearest) is cut at a question boundary. Records are merged back in question order.
    """
    from crag_lab.eval import COMPARED_MODES

    cost = {m: COST[m] * (n - prefix if m == "knowledge_base" else n) for m in COMPARED_MODES}
    share = sum(cost.values()) / workers
    plans: list[list[tuple[str, int, int]]] = [[] for _ in range(workers)]
    w, load = 0, 0.0
    for mode in sorted(COMPARED_MODES, key=lambda m: m == "per_item_grading"):
        start = 0
        while start < n:
            per_q = cost[mode] / n
            room = share - load
            take = n - start if w == workers - 1 else max(1, min(n - start, round(room / per_q))) if room > 0 else 0
            if take:
                plans[w].append((mode, start, start + take))
                load += take * per_q
                start += take
            if start < n:
                w, load = w + 1, 0.0
    return [p for p in plans if p]


def run_in_workers(plans: Sequence[Sequence[tuple[str, int, int]]], args: argparse.Namespace) -> dict[str, Any]:
    """Run each plan in its own process at once (one torch thread each); merge the slices per mode."""
    import subprocess

    from crag_lab.replay import Experiment

    folder = RUNS / "parts"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = []
    for i, plan in enumerate(plans):
        cmd = [PYTHON, __file__, "--part", json.dumps(plan), "--part-out", str(folder / f"worker{i}"),
               *(["--quick"] if args.quick else []), *(["--prefix-run", args.prefix_run] if args.prefix_run else [])]
        log(f"calls: worker {i}: {', '.join(f'{m} {a + 1}-{b}' for m, a, b in plan)}")
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [proc.wait() for proc in procs]
    if any(codes):
        raise RuntimeError(f"calls: a worker failed (exit codes {codes})")
    slices: dict[str, list[Any]] = {}
    for i, plan in enumerate(plans):
        for j, (mode, start, _) in enumerate(plan):
            exp = Experiment.load(folder / f"worker{i}-{j}.jsonl")
            slices.setdefault(mode, []).append((start, exp))
    merged = {}
    for mode, parts in slices.items():
        parts.sort(key=lambda p: p[0])
        first = parts[0][1]
        if any(p.config != first.config for _, p in parts):
            raise RuntimeError(f"calls: the {mode} slices ran at different configs")
        meta = {**first.meta, "wall_s": round(sum(float(p.meta["wall_s"]) for _, p in parts), 2),
                "reused": sum(int(p.meta.get("reused", 0)) for _, p in parts), "slices": len(parts)}
        merged[mode] = Experiment(first.config, [r for _, p in parts for r in p.records], meta)
    return merged


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv, reuse_flag)
    from crag_lab.eval import COMPARED_MODES, Evaluation, load_kb_queries
    from crag_lab.eval.datasets import EvalSet
    from crag_lab.replay import Experiment

    started = time.perf_counter()
    dataset = load_kb_queries(QUERIES, kb=KB)
    if args.quick:
        dataset = EvalSet(dataset.name, stratified(dataset.queries, 24), dataset.source, kb=dataset.kb)  # type: ignore[arg-type]
    if args.part:  # a worker of run_in_workers
        import torch

        torch.set_num_threads(1)
        plan = [(str(m), int(a), int(b)) for m, a, b in json.loads(args.part)]
        for j, exp in enumerate(run_slices(plan, dataset.rows(), args.prefix_run)):
            exp.save(f"{args.part_out}-{j}.jsonl")
        return {}
    labels = {q.id: q.complexity for q in dataset.queries}
    rows = dataset.rows()
    experiments, configs, wall, reused = {}, {}, {}, {}
    split: list[list[str]] = []  # the questions each worker process ran (empty: scored saved runs)
    saved = {mode: RUNS / f"{mode}{'-quick' if args.quick else ''}.jsonl" for mode in COMPARED_MODES}
    if args.reuse and all(p.is_file() for p in saved.values()):
        log(f"calls: scoring the saved runs in {RUNS}")
        for mode, path in saved.items():
            exp = Experiment.load(path)
            experiments[mode], configs[mode], wall[mode] = exp, exp.config, exp.meta.get("wall_s")
    else:
        prefix = len(Experiment.load(args.prefix_run)) if args.prefix_run and Path(args.prefix_run).is_file() else 0
        plans = plan_slices(len(rows), prefix, max(1, args.workers))
        split = [[f"{m} {a + 1}-{b}" for m, a, b in plan] for plan in plans]
        if len(plans) == 1:
            runs = dict(zip([m for m, _, _ in plans[0]], run_slices(plans[0], rows, args.prefix_run), strict=True))
        else:
            runs = run_in_workers(plans, args)
        for mode in COMPARED_MODES:
            exp = runs[mode]
            if [str(r["id"]) for r in exp.records] != [str(r["id"]) for r in rows]:
                raise RuntimeError(f"calls: the {mode} run does not hold every question once, in order")
            wall[mode], reused[mode] = exp.meta["wall_s"], int(exp.meta.get("reused", 0))
            exp.save(saved[mode])
            experiments[mode], configs[mode] = exp, exp.config
    ev = Evaluation.from_experiments(dataset, experiments, configs)

    modes: dict[str, Any] = {}
    for mode, exp in experiments.items():
        metrics = ev.metrics(mode)
        totals = [usage_numbers(r) for r in exp.records]
        n = len(totals)
        modes[mode] = {
            "wall_s": wall[mode],
            "records_reused_from_memory_run": reused.get(mode, 0),
            "model_failures": grader_failures(exp.records),
            "calls_per_query": round(sum(t["calls"] for t in totals) / n, 3),
            "tokens_per_query": round(sum(t["tokens"] for t in totals) / n, 1),
            "grader_calls_per_query": round(sum(t["grader_calls"] for t in totals) / n, 3),
            "grader_tokens_per_query": round(sum(t["grader_tokens"] for t in totals) / n, 1),
            "by_class": per_class(exp.records, labels),
            "quality": {k: metrics.get(k) for k in QUALITY},
            "quality_by_class": {cls: {k: v.get(k) for k in QUALITY[:3]}
                                 for cls, v in ev.metrics(mode, by="complexity").items()},
            "routes": dict(sorted(ev.queries[ev.queries["mode"] == mode]["route"].value_counts().items())),
        }
    crag, per_item = modes["knowledge_base"], modes["per_item_grading"]
    q = ev.queries
    kb_rows = q[q["mode"] == "knowledge_base"].set_index("id")
    pi_rows = q[q["mode"] == "per_item_grading"].set_index("id")
    answerable = [i for i in kb_rows.index if kb_rows.loc[i, "contained"] is not None
                  and kb_rows.loc[i, "contained"] == kb_rows.loc[i, "contained"]]
    paired: dict[str, Any] = {
        "contained_only_by_crag": sum(bool(kb_rows.loc[i, "contained"]) and not bool(pi_rows.loc[i, "contained"])
                                      for i in answerable),
        "contained_only_by_per_item": sum(bool(pi_rows.loc[i, "contained"]) and not bool(kb_rows.loc[i, "contained"])
                                          for i in answerable),
    }
    unanswerable = q[(q["answerable"] == False) & (q["mode"] != "naive_rag")]  # noqa: E712 - a pandas mask
    answered_by_crag_only = []
    for qid in sorted(set(unanswerable["id"])):
        if not bool(kb_rows.loc[qid, "abstained"]) and bool(pi_rows.loc[qid, "abstained"]):
            answered_by_crag_only.append({"id": qid, "route": kb_rows.loc[qid, "route"],
                                          "complexity": kb_rows.loc[qid, "complexity"]})
    paired["unanswerable_answered_by_crag_only"] = answered_by_crag_only
    ratios = {
        "calls_vs_per_item": ratio(crag["calls_per_query"], per_item["calls_per_query"]),
        "grader_tokens_vs_per_item": ratio(crag["grader_tokens_per_query"], per_item["grader_tokens_per_query"]),
        "tokens_vs_per_item": ratio(crag["tokens_per_query"], per_item["tokens_per_query"]),
        "calls_vs_naive_rag": ratio(crag["calls_per_query"], modes["naive_rag"]["calls_per_query"]),
    }

    def no_worse(key: str) -> bool | None:
        a, b = crag["quality"].get(key), per_item["quality"].get(key)
        return None if a is None or b is None else a >= b - 1e-9

    log("calls: forced worst cases")
    worst = worst_cases()
    max_iter = configs["knowledge_base"].max_iterations
    bound = worst_case_formula(max_iter, configs["knowledge_base"].top_k, "batch")
    observed_max = max(t["calls"] for t in (usage_numbers(r) for r in experiments["knowledge_base"].records))
    result = {
        "questions": len(rows),
        "quick": args.quick,
        "workers": split,
        "modes": modes,
        "ratios": ratios,
        "paired_containment": paired,
        "targets": {
            "calls_le_0.5x_per_item": ratios["calls_vs_per_item"] is not None and ratios["calls_vs_per_item"] <= 0.5,
            "grader_tokens_le_0.6x_per_item": ratios["grader_tokens_vs_per_item"] is not None
            and ratios["grader_tokens_vs_per_item"] <= 0.6,
            "containment_no_worse": no_worse("answer_containment"),
            "abstention_no_worse": no_worse("abstention_rate"),
        },
        "worst_case": {
            "formula_batch": "3·max_iterations + 1",
            "formula_per_item": "max_iterations·(top_k + 2) + 1 (one top_k search per round; in general "
                                "Σ_rounds (2 + new items of the round) + 1)",
            "forced": worst,
            "all_forced_match": all(r["matches"] for r in worst),
            "batch_bound_at_config": bound,
            "batch_observed_max": observed_max,
            "batch_within_bound": observed_max <= bound,
            "per_item_identity": per_item_identity(experiments["per_item_grading"].records),
        },
        "wall_s": round(time.perf_counter() - started, 1),
    }
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
