"""``crag-lab eval``: run a labelled query set through the agent's modes and write the metrics.

    crag-lab eval --dataset data/kb_queries.jsonl --kb data/kb --json docs/evaluation.json
    crag-lab eval --dataset path/to/beir_folder --limit 60 --mode knowledge_base --json out.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from crag_lab.eval.runner import COMPARED_MODES, EVAL_MODES
from crag_lab.models import TASKS


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``eval`` on the ``crag-lab`` sub-command parser (called by `crag_lab.cli`)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "eval", help="measure the agent on a labelled query set (KB queries or a BEIR-style folder)")
    p.add_argument("--dataset", required=True,
                   help="a .jsonl query file (data/kb_queries.jsonl) or a folder with corpus.jsonl, "
                        "queries.jsonl, qrels.tsv")
    p.add_argument("--mode", action="append", choices=[*EVAL_MODES, "all"],
                   help=f"repeatable; default: {' '.join(COMPARED_MODES)}; 'all' adds normal")
    p.add_argument("--limit", type=int, help="a seeded sample of N queries (a BEIR corpus shrinks to what they need)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed for --limit (default 0)")
    p.add_argument("--kb", help="knowledge-base folder (default data/kb for a query file; a BEIR folder is written "
                                "to --cache-dir)")
    p.add_argument("--cache-dir", default=".cache/eval_kb", help="where BEIR passages become a knowledge base")
    p.add_argument("--json", dest="json_out", help="write the metrics as JSON here")
    p.add_argument("--markdown", help="write the Markdown report here")
    p.add_argument("--csv", help="write the per-query table as CSV here")
    p.add_argument("--save-runs", help="save each mode's Experiment as JSONL in this folder (replayable)")
    p.add_argument("--aggregator", choices=["mean", "max", "any_above"])
    p.add_argument("--floor", type=float, help="relevance_floor (default 0.3)")
    p.add_argument("--generate", type=float, help="generate_threshold (default 0.7)")
    p.add_argument("--vector-threshold", type=float, help="vector_score_threshold (default 0.8)")
    p.add_argument("--max-iterations", type=int)
    p.add_argument("--top-k", type=int)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    real = p.add_argument_group("a real model (OpenAI-compatible server: llama.cpp, vLLM, Ollama, ...)")
    real.add_argument("--api-base", help="the server's URL, e.g. http://127.0.0.1:8080/v1 (default: the offline model)")
    real.add_argument("--model", help="the model id to ask for (default: the server's first)")
    real.add_argument("--api-key-env", default="OPENAI_API_KEY",
                      help="environment variable holding the API key (default OPENAI_API_KEY; none needed locally)")
    real.add_argument("--timeout", type=float, default=60.0, help="seconds per model call (default 60)")
    real.add_argument("--completions", action="store_true",
                      help="send prompts to /completions as they are (a base model without a chat template)")
    real.add_argument("--server-tasks", nargs="+", choices=list(TASKS), metavar="TASK",
                      help="ask the server only these tasks (analyze, plan, grade, synthesize); the offline "
                           "model answers the rest (default: all four from the server)")
    real.add_argument("--structured", choices=["auto", "always", "never"], default="auto",
                      help="schema-constrained JSON for analyze, plan and grade (default auto: where supported)")
    p.add_argument("--cache", help="a response cache (SQLite file): a re-run makes no model call twice")
    p.add_argument("--concurrency", type=int, default=1, help="questions in flight at once (default 1)")
    scale = p.add_argument_group("scale out on Ray (pip install 'crag-lab[scale]')")
    scale.add_argument("--ray", nargs="?", const="ray", metavar="ADDRESS",
                       help="shard the questions over Ray workers: alone, a local Ray (or RAY_ADDRESS); with an "
                            "address ('auto', 'ray://HEAD:10001', 'HEAD:6379'), that cluster")
    scale.add_argument("--workers", type=int, help="Ray workers (default: every CPU of the cluster)")
    p.add_argument("--journal-dir", default=".cache/eval/journal",
                   help="where unfinished runs are journaled; run the same command again to resume (default "
                        ".cache/eval/journal)")
    p.set_defaults(func=cmd_eval)
    return p


def _config(args: argparse.Namespace) -> Any:
    from crag_lab.config import CragConfig

    overrides = {k: v for k, v in {
        "relevance_floor": args.floor, "generate_threshold": args.generate,
        "vector_score_threshold": args.vector_threshold, "max_iterations": args.max_iterations,
        "top_k": args.top_k, "aggregator": args.aggregator,
    }.items() if v is not None}
    return CragConfig(**overrides)


def _modes(chosen: list[str] | None) -> list[str]:
    if not chosen:
        return list(COMPARED_MODES)
    if "all" in chosen:
        return list(EVAL_MODES)
    return list(dict.fromkeys(chosen))


def cmd_eval(args: argparse.Namespace) -> int:
    from crag_lab.eval.datasets import load_dataset
    from crag_lab.eval.runner import evaluate
    from crag_lab.lab import Lab

    if args.server_tasks and not args.api_base:
        raise SystemExit("crag-lab eval: --server-tasks names the tasks a server answers; give the server with --api-base")
    dataset = load_dataset(args.dataset, limit=args.limit, seed=args.seed, kb=args.kb)
    kb = dataset.write_kb(args.cache_dir)
    progress = not args.no_progress
    if progress:
        print(f"{dataset.name}: {len(dataset)} queries, knowledge base {kb}", file=sys.stderr, flush=True)
    config = _config(args).with_changes(model_timeout_s=args.timeout)
    llm: Any = None
    if args.api_base:
        import os

        from crag_lab.models import LlamaIndexModel
        from crag_lab.servers import openai_compatible

        llm = LlamaIndexModel(openai_compatible(args.api_base, args.model, api_key=os.environ.get(args.api_key_env),
                                                timeout_s=args.timeout, chat=not args.completions),
                              structured=args.structured)
        if args.server_tasks:
            llm = dict.fromkeys(args.server_tasks, llm)
    executor = None
    if args.ray:
        from crag_lab.ray_executor import RayExecutor, resolve_executor

        resolve_executor(args.ray)  # an address that is not one fails now, before the model loads
        executor = RayExecutor(None if args.ray == "ray" else args.ray, workers=args.workers)
    lab = Lab.from_directory(kb, config=config, llm=llm, remote=False, cache=args.cache)
    try:
        ev = evaluate(lab, dataset, _modes(args.mode), config=config, progress=progress,
                      concurrency=args.concurrency, journal_dir=args.journal_dir, executor=executor)
    finally:
        if executor is not None:
            executor.close()
    cache = getattr(lab.model, "cache", None)
    if cache is not None:
        print(f"response cache {args.cache}: {cache.stats()}", file=sys.stderr)
    command = "crag-lab eval " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 1 else None
    result = ev.to_json(command=command)
    if args.json_out:
        _write(args.json_out, json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n")
    if args.markdown:
        _write(args.markdown, ev.to_markdown(command=command))
    if args.csv:
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        ev.queries.to_csv(args.csv, index=False)
    if args.save_runs:
        for mode, exp in ev.experiments.items():
            exp.save(Path(args.save_runs) / f"{dataset.name}-{mode}.jsonl")
    print(ev.to_markdown(command=command))
    return 0


def _write(path: str, text: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
