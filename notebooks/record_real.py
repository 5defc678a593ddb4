"""Record twelve KB questions with a real model for notebook 05: llama.cpp's server + Gemma 3 270M.

Every reply goes into a response cache (recordings/gemma_responses.sqlite), so the notebook runs the
same questions again from the cache, with no server, and nbval can check it offline. The same
questions are then asked once more *without* schema constraints, to measure how often each node's
reply fails to parse with and without them (docs/eval/real_model.md, docs/evaluation.md). Needs the
realmodel extra (`make .venv/.realmodel`). About twenty minutes on two cores.

    .venv/bin/python notebooks/record_real.py
"""

from __future__ import annotations

import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
IDS = ["a001", "a002", "a005", "a013", "a006", "a022", "a053", "b026", "b039", "a010", "a030", "b012"]
CACHE = HERE / "recordings" / "gemma_responses.sqlite"
RECORDING = HERE / "recordings" / "kb_gemma.jsonl"


def config():  # type: ignore[no-untyped-def]
    """Three passages, two rounds (a 270M model on a CPU is slow), and no routing shortcut: the model still
    classifies every question, but every question is retrieved and graded, so its grades can be explored."""
    from crag_lab import CragConfig

    return CragConfig(top_k=3, max_iterations=2, model_timeout_s=300, model_retries=1, routing=False)


def questions() -> list[dict]:
    import json

    rows = [json.loads(line) for line in (ROOT / "data" / "kb_queries.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in IDS]


def main() -> None:
    from crag_lab import Lab
    from crag_lab.models import LlamaIndexModel
    from crag_lab.servers import GEMMA_ID, openai_compatible, start_llama_server

    CACHE.unlink(missing_ok=True)
    start = time.perf_counter()
    runs = {}
    with start_llama_server(port=8080, parallel=2, context=8192) as server:
        for structured in ("auto", "never"):
            model = LlamaIndexModel(openai_compatible(server.url, GEMMA_ID, chat=False, timeout_s=300, max_tokens=200),
                                    structured=structured)  # type: ignore[arg-type]
            lab = Lab.from_directory(ROOT / "data" / "kb", config=config(), llm=model, remote=False,
                                     cache=CACHE if structured == "auto" else None)
            runs[structured] = lab.run(questions(), concurrency=2)
            print(f"structured={structured}: {time.perf_counter() - start:.0f} s", flush=True)
    runs["auto"].save(RECORDING)
    import sqlite3

    with sqlite3.connect(CACHE) as db:  # one self-contained file to commit: no -wal / -shm beside it
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA journal_mode=DELETE")
    write_parse_report(runs)
    print(f"{len(runs['auto'])} questions -> {RECORDING.relative_to(ROOT)}, cache {CACHE.relative_to(ROOT)} "
          f"({time.perf_counter() - start:.0f} s)")


PARSE_EVENTS = {"analyze": "classification_unavailable", "plan": "plan_parse_failed", "grade": "grader_parse_failed"}


def parse_failures(exp) -> dict[str, tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Per node: (replies that did not parse, replies), from the audit events of every record."""
    out = {}
    for task, event in PARSE_EVENTS.items():
        calls = sum(1 for r in exp.records for u in r["usage"] if u["task"] == task and u["ok"])
        failed = sum(int((r.get("audit_events") or {}).get(event, 0)) for r in exp.records)
        out[task] = (failed, calls)
    return out


def write_parse_report(runs) -> None:  # type: ignore[no-untyped-def]
    rows = ["| node | with JSON schema | without |", "|---|---:|---:|"]
    rates = {k: parse_failures(v) for k, v in runs.items()}
    for task in PARSE_EVENTS:
        cells = []
        for structured in ("auto", "never"):
            failed, calls = rates[structured][task]
            cells.append(f"{failed} of {calls} ({failed / calls:.0%})" if calls else "no calls")
        rows.append(f"| {task} | {' | '.join(cells)} |")
    text = (
        "Gemma 3 270M (Q4_K_M, a base model) on llama.cpp's server, asked the twelve KB questions of\n"
        "notebook 05 (`notebooks/record_real.py`: top_k 3, two rounds) twice: with schema-constrained JSON\n"
        "(llama.cpp's `json_schema` on `/completions`) and without. A reply that fails to parse is one\n"
        "whose node fell back (analyze: no valid complexity, so the full pipeline; plan: text extraction;\n"
        "grade: 0.5 for every item). Calls differ between the columns because the runs take different paths.\n\n"
        + "\n".join(rows) + "\n")
    target = ROOT / "docs" / "eval" / "real_model.md"
    target.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
