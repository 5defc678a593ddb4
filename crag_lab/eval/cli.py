"""``crag-lab eval``: run a labelled query set through the agent's modes and write the metrics.

    crag-lab eval --dataset data/kb_queries.jsonl --kb data/kb --json docs/evaluation.json
    crag-lab eval --dataset path/to/beir_folder --limit 60 --mode knowledge_base --json out.json

Every path the command writes (``--json``, ``--markdown``, ``--csv``, ``--save-runs``, ``--cache``,
the journals in ``--journal-dir``) is checked before the first question. The journals are removed
only once every result is written: if a write fails after the run, the same command run again asks
nothing and only writes the results.
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
    real.add_argument("--timeout", type=float, default=60.0,
                      help="seconds a model call may take; longer when the server's measured speed says its "
                           "task's token cap needs it (default 60)")
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


def _outputs(args: argparse.Namespace, dataset: Any, modes: list[str]) -> list[tuple[str, str | Path | None, bool]]:
    """``(option, path, is_folder)`` of everything the command writes, the journals included."""
    from crag_lab.eval.runner import journal_path

    outputs: list[tuple[str, str | Path | None, bool]] = [
        ("--json", args.json_out, False), ("--markdown", args.markdown, False), ("--csv", args.csv, False),
        ("--cache", None if args.cache == ":memory:" else args.cache, False),
        ("--save-runs", args.save_runs, True), ("--journal-dir", args.journal_dir, True)]
    for mode in modes:
        if args.save_runs:
            outputs.append(("--save-runs", Path(args.save_runs) / f"{dataset.name}-{mode}.jsonl", False))
        outputs.append(("--journal-dir", journal_path(dataset, mode, args.journal_dir), False))
    return outputs


def cmd_eval(args: argparse.Namespace) -> int:
    from crag_lab._paths import check_outputs
    from crag_lab.eval.datasets import load_dataset
    from crag_lab.eval.runner import evaluate, journal_path
    from crag_lab.lab import Lab
    from crag_lab.records import check_unique_ids

    if args.server_tasks and not args.api_base:
        raise SystemExit("crag-lab eval: --server-tasks names the tasks a server answers; give the server with --api-base")
    dataset = load_dataset(args.dataset, limit=args.limit, seed=args.seed, kb=args.kb)
    check_unique_ids([q.id for q in dataset.queries], source=str(dataset.source))
    modes = _modes(args.mode)
    check_outputs(_outputs(args, dataset, modes))  # before the model loads and the first question is asked
    kb = dataset.write_kb(args.cache_dir)
    progress = not args.no_progress
    if progress:
        print(f"{dataset.name}: {len(dataset)} queries, knowledge base {kb}", file=sys.stderr, flush=True)
    config = _config(args).with_changes(model_timeout_s=args.timeout)
    llm: Any = None
    if args.api_base:
        import os

        from crag_lab.models import TASK_MAX_TOKENS, LlamaIndexModel
        from crag_lab.servers import openai_compatible

        llm = LlamaIndexModel(openai_compatible(args.api_base, args.model, api_key=os.environ.get(args.api_key_env),
                                                timeout_s=max(args.timeout, 1800.0), chat=not args.completions),
                              structured=args.structured, task_max_tokens=TASK_MAX_TOKENS, warm_up=True)
        if args.server_tasks:
            llm = dict.fromkeys(args.server_tasks, llm)
    executor = None
    if args.ray:
        from crag_lab.ray_executor import RayExecutor, resolve_executor

        resolve_executor(args.ray)  # an address that is not one fails now, before the model loads
        executor = RayExecutor(None if args.ray == "ray" else args.ray, workers=args.workers)
    lab = Lab.from_directory(kb, config=config, llm=llm, remote=False, cache=args.cache)
    try:
        ev = evaluate(lab, dataset, modes, config=config, progress=progress, concurrency=args.concurrency,
                      journal_dir=args.journal_dir, executor=executor, keep_journals=True)
    finally:
        if executor is not None:
            executor.close()
    cache = getattr(lab.model, "cache", None)
    if cache is not None:
        print(f"response cache {args.cache}: {cache.stats()}", file=sys.stderr)
    argv = getattr(args, "argv", None) or sys.argv[1:]
    command = "crag-lab " + " ".join(shlex.quote(a) for a in argv) if argv else None
    journals = [journal_path(dataset, mode, args.journal_dir) for mode in modes]
    _write_results(args, ev, dataset.name, command, journals)
    for journal in journals:  # every result is on disk: the answers are no longer needed
        journal.unlink(missing_ok=True)
    print(ev.to_markdown(command=command))
    return 0


def _write_results(args: argparse.Namespace, ev: Any, name: str, command: str | None, journals: list[Path]) -> None:
    """Write every result the options ask for; a failure says where the answers are and how to write them again."""
    from crag_lab._paths import OutputWriteError, write_text

    what, path = "", ""
    try:
        if args.json_out:
            what, path = "--json", args.json_out
            write_text(path, json.dumps(ev.to_json(command=command), indent=2, ensure_ascii=False, default=str) + "\n")
        if args.markdown:
            what, path = "--markdown", args.markdown
            write_text(path, ev.to_markdown(command=command))
        if args.csv:
            what, path = "--csv", args.csv
            write_text(path, ev.queries.to_csv(index=False))
        if args.save_runs:
            for mode, exp in ev.experiments.items():
                what, path = "--save-runs", str(Path(args.save_runs) / f"{name}-{mode}.jsonl")
                exp.save(path)
    except OSError as exc:
        again = command or "the same crag-lab eval command"
        raise OutputWriteError(
            f"could not write {what} {path} ({exc}); every answer is kept in the journal(s) "
            f"{', '.join(map(str, journals))}: fix that, then run the same command again, which asks nothing and "
            f"only writes the results: {again}") from exc
