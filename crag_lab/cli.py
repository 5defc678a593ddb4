"""``crag-lab``: index a knowledge base, ask it questions, run the demo, evaluate, tune thresholds.

    crag-lab index data/kb
    crag-lab index data/kb --ray auto        # embed on a Ray cluster (Ray Data)
    crag-lab ask "How do I rotate the gateway certificates?" --kb data/kb
    crag-lab demo --kb data/kb --queries data/kb_queries.jsonl
    crag-lab tune runs/knowledge_base.jsonl --budget 4
    crag-lab export-traces runs/knowledge_base.jsonl --otlp http://127.0.0.1:6006/v1/traces
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEMO_ROUTES = ("chitchat", "simple", "GENERATE", "REFINE or RE_RETRIEVE", "unanswerable")


def _config(args: argparse.Namespace) -> Any:
    from crag_lab.config import CragConfig

    overrides = {k: v for k, v in {
        "relevance_floor": getattr(args, "floor", None),
        "generate_threshold": getattr(args, "generate", None),
        "vector_score_threshold": getattr(args, "vector_threshold", None),
        "max_iterations": getattr(args, "max_iterations", None),
        "top_k": getattr(args, "top_k", None),
    }.items() if v is not None}
    return CragConfig(**overrides)


def _lab(args: argparse.Namespace) -> Any:
    from crag_lab.lab import Lab

    return Lab.from_directory(args.kb, config=_config(args), audit_path=getattr(args, "audit", None))


def cmd_index(args: argparse.Namespace) -> int:
    from crag_lab.kb import KnowledgeBase

    embed_with: Any = "local"
    if args.ray:
        from crag_lab.ray_index import RayDataEmbedder, resolve_embedder

        resolve_embedder(args.ray)  # an address that is not one fails now, before any file is read
        embed_with = RayDataEmbedder(None if args.ray == "ray" else args.ray, workers=args.workers)
    # No embed_model: the bundled one loads only once there is something to embed, after the cheap
    # checks (the folder exists and holds text) and never for a rebuild where nothing changed.
    kb = KnowledgeBase.build(args.kb, cache_dir=args.cache_dir, embed_with=embed_with)
    report = dict(kb.build_report or {})
    if args.ray:
        report["ray_data"] = embed_with.last_run or None  # batches, workers, texts, seconds; None: nothing embedded
    if args.prepare:
        from crag_lab.offline import OfflineModel

        report["units_encoded"] = OfflineModel(kb=kb).prepare()
    print(json.dumps(report, indent=2, default=str))
    return 0


def _print_result(result: Any, *, show_path: bool = True) -> None:
    print(result.answer)
    if show_path:
        print(f"\npath: {' → '.join(result.path)}   route: {result.route}   "
              f"model calls: {result.llm_calls}   tokens: {result.tokens}")


def cmd_ask(args: argparse.Namespace) -> int:
    from crag_lab._text import check_question

    check_question(args.question)  # before the seconds the model and the index take to load
    lab = _lab(args)
    result = lab.ask(args.question, mode=args.mode)
    if args.json:
        print(json.dumps({"answer": result.answer, "path": result.path, "route": result.route,
                          "llm_calls": result.llm_calls, "tokens": result.tokens, "audit": result.audit},
                         indent=2, ensure_ascii=False, default=str))
    else:
        _print_result(result)
    return 0


def load_queries(path: str | Path) -> list[dict[str, Any]]:
    """The labelled questions of a JSONL file, one object per line."""
    rows = []
    with Path(path).open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: not valid JSON ({exc})") from None
    return rows


def pick_demo(lab: Any, queries: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any], Any]]:
    """One labelled question per route, found by running candidates until each route is shown."""
    picked: dict[str, tuple[dict[str, Any], Any]] = {}

    def want(route: str, rows: Sequence[dict[str, Any]], accept: Any) -> None:
        for row in rows:
            if route in picked:
                return
            result = lab.ask(row["question"])
            if accept(result):
                picked[route] = (row, result)

    answerable = [q for q in queries if q.get("answerable", True)]
    want("chitchat", [q for q in answerable if q["complexity"] == "chitchat"], lambda r: r.route == "chitchat")
    want("simple", [q for q in answerable if q["complexity"] == "simple"], lambda r: r.route == "simple")
    complex_rows = [q for q in answerable if q["complexity"] == "complex"]
    want("GENERATE", complex_rows, lambda r: [x["action"] for x in r.state.get("rounds", [])] == ["GENERATE"])
    want("REFINE or RE_RETRIEVE", complex_rows,
         lambda r: any(x["action"] in ("REFINE", "RE_RETRIEVE") for x in r.state.get("rounds", [])))
    want("unanswerable", [q for q in queries if not q.get("answerable", True)], lambda r: True)
    return [(route, *picked[route]) for route in DEMO_ROUTES if route in picked]


def cmd_demo(args: argparse.Namespace) -> int:
    queries = load_queries(args.queries)  # before the seconds the model and the index take to load
    by_id = {row["id"]: row for row in queries}
    missing = [i for i in args.ids or [] if i not in by_id]
    if missing:
        raise ValueError(f"{args.queries}: no question with id {', '.join(missing)}")
    lab = _lab(args)
    report = dict(lab.kb.build_report or {}) if lab.kb is not None else {}
    print(f"Knowledge base {args.kb}: {report.get('files_total', '?')} files, {report.get('chunks_total', '?')} chunks "
          f"({report.get('chunks_embedded', 0)} embedded now, {report.get('chunks_reused', 0)} reused)\n")
    if args.ids:
        shown = [(lab.ask(by_id[i]["question"]), by_id[i]) for i in args.ids]
        picked = [(result.route, row, result) for result, row in shown]
    else:
        picked = pick_demo(lab, queries)
    for route, row, result in picked:
        print("=" * 100)
        expected = f"   (labelled answer: {row['answer']})" if row.get("answer") else ""
        print(f"[{route}]  {row['id']}: {row['question']}{expected}")
        print("-" * 100)
        _print_result(result)
        print()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crag-lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def thresholds(p: argparse.ArgumentParser) -> None:
        p.add_argument("--floor", type=float, help="relevance_floor (default 0.3)")
        p.add_argument("--generate", type=float, help="generate_threshold (default 0.7)")
        p.add_argument("--vector-threshold", type=float, help="vector_score_threshold (default 0.8)")
        p.add_argument("--max-iterations", type=int)
        p.add_argument("--top-k", type=int)
        p.add_argument("--audit", help="append every audit event to this JSONL file")

    p = sub.add_parser("index", help="build or update the persisted index of a knowledge base")
    p.add_argument("kb")
    p.add_argument("--cache-dir", help="the index folder (default: KB/.crag_index): new, empty or an index folder; "
                                       "only what the index wrote there is ever removed")
    p.add_argument("--prepare", action="store_true",
                   help="also encode every chunk's sentences for the offline model now (once per index), "
                        "so the first questions run at warm speed")
    scale = p.add_argument_group("scale out on Ray (pip install 'crag-lab[scale]')")
    scale.add_argument("--ray", nargs="?", const="ray", metavar="ADDRESS",
                       help="embed the chunks in a Ray Data stage (same index, same vectors): alone, a local Ray "
                            "(or RAY_ADDRESS); with an address ('auto', 'ray://HEAD:10001', 'HEAD:6379'), that cluster")
    scale.add_argument("--workers", type=int, help="Ray Data workers (default: every CPU of the cluster)")
    p.set_defaults(func=cmd_index)

    p = sub.add_parser("ask", help="answer one question")
    p.add_argument("question")
    p.add_argument("--kb", default="data/kb")
    p.add_argument("--mode", default="knowledge_base", choices=["knowledge_base", "normal", "naive_rag"])
    p.add_argument("--json", action="store_true", help="print the answer, path and audit trail as JSON")
    thresholds(p)
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("demo", help="answer one labelled question per route, offline")
    p.add_argument("--kb", default="data/kb")
    p.add_argument("--queries", default="data/kb_queries.jsonl")
    thresholds(p)
    p.add_argument("--ids", type=lambda text: [i.strip() for i in text.split(",") if i.strip()],
                   help="comma-separated question ids to show (default: one question per route)")
    p.set_defaults(func=cmd_demo)

    try:
        from crag_lab.eval.cli import add_eval_parser
    except ImportError:
        pass
    else:
        add_eval_parser(sub)
    from crag_lab._trace_cli import add_export_parser
    from crag_lab.replay.cli import add_tune_parser
    from crag_lab.servers import add_serve_parser

    add_tune_parser(sub)
    add_serve_parser(sub)
    add_export_parser(sub)
    return parser


def one_line(exc: BaseException) -> str:
    """An error as one line: a pydantic ``ValidationError`` as ``field: message (got value)`` per error.

    >>> from crag_lab.config import CragConfig
    >>> try:
    ...     CragConfig(relevance_floor=2)
    ... except ValueError as exc:
    ...     print(one_line(exc))
    invalid setting relevance_floor: Input should be less than or equal to 1 (got 2)
    """
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        parts = []
        for error in exc.errors(include_url=False):
            field = ".".join(str(part) for part in error["loc"])
            got = "" if isinstance(error.get("input"), dict) else f" (got {error.get('input')!r})"
            parts.append(f"{field + ': ' if field else ''}{error['msg']}{got}")
        return "invalid setting " + "; ".join(parts)
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every error about the input is one line on stderr and exit status 2.

    Errors about the input are ``CragLabError`` (the package's own), ``OSError`` (a missing or
    unreadable file) and ``ValueError`` (a bad value, an invalid setting); anything else is a bug
    and keeps its traceback. Every command first runs `crag_lab._preflight.preflight`, so a bad
    ``.env``, setting, ``--api-base`` or ``--cache`` fails before the model loads or the index builds.
    """
    from crag_lab.errors import CragLabError

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as typed (``crag-lab eval`` reports it)
    try:
        from crag_lab._preflight import preflight

        preflight(args)  # .env, every KB_AGENT_* / CRAG_* setting, --api-base, --cache: before a model loads
        return int(args.func(args))
    except (CragLabError, OSError, ValueError) as exc:
        print(f"crag-lab: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("crag-lab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
