"""``crag-lab export-traces``: a recorded run as OpenTelemetry traces, for Phoenix or any OTLP backend.

    crag-lab export-traces runs/kb.jsonl --otlp http://127.0.0.1:6006/v1/traces
    crag-lab export-traces runs/kb.jsonl --file runs/kb.otlp.jsonl --start 2026-01-01T00:00:00Z
    crag-lab export-traces runs/kb.jsonl --otlp http://127.0.0.1:6006 --replay relevance_floor=0.5
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def _setting(text: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (e.g. relevance_floor=0.5)")
    return name.strip(), value.strip()


def add_export_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``export-traces`` on the ``crag-lab`` sub-command parser (called by `crag_lab.cli`)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "export-traces", help="a recorded run as OpenTelemetry traces (OpenInference): Phoenix, any OTLP backend, a file")
    p.add_argument("experiment", help="a recorded run (Experiment.save, crag-lab eval --save-runs)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--otlp", metavar="URL", help="an OTLP/HTTP endpoint, e.g. Phoenix's http://127.0.0.1:6006/v1/traces")
    where.add_argument("--file", metavar="PATH", help="write OTLP/JSON lines, one question's trace per line")
    p.add_argument("--start", metavar="TIME", help="when the first question starts, ISO 8601 (default: when the "
                                                   "recording was made if it says, else now)")
    p.add_argument("--replay", metavar="NAME=VALUE", type=_setting, action="append", default=[],
                   help="export the replay at this setting instead of the recorded decisions (repeatable)")
    p.add_argument("--project", default="crag_lab", help="the project the traces are filed under (default crag_lab)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds an OTLP request may take (default 10)")
    p.add_argument("--skip-invalid", action="store_true", help="skip record lines that are not valid (a killed recording)")
    p.set_defaults(func=cmd_export_traces)
    return p


def cmd_export_traces(args: argparse.Namespace) -> int:
    from crag_lab.replay.experiment import Experiment
    from crag_lab.traces import export_traces

    if args.file is not None:
        from crag_lab._paths import check_output

        check_output(args.file, what="--file")
    if args.otlp is not None:
        from crag_lab._env import check_url

        check_url(args.otlp, what="--otlp", example="http://127.0.0.1:6006/v1/traces")
    exp = Experiment.load(args.experiment, skip_invalid=args.skip_invalid)
    done = export_traces(exp, endpoint=args.otlp, path=args.file, replay=dict(args.replay) or None, start=args.start,
                         project=args.project, timeout_s=args.timeout)
    print(done.line())
    lacking = done.lacking()
    if lacking is not None:
        print(f"crag-lab: note: {lacking}", file=sys.stderr)
    return 0
