"""Check a labelled question set about the knowledge base (JSON lines) against the KB files.

    python3 scripts/check_queries.py                                   # data/kb_queries_test.jsonl, data/kb
    python3 scripts/check_queries.py data/kb_queries_test.jsonl data/kb

Every line must be one JSON object with exactly the fields ``id``, ``question``, ``complexity``,
``answerable``, ``answer``, ``gold`` and ``tools``. The script checks:

- field names and types, unique ids, ``complexity`` in chitchat / simple / complex,
  tools drawn from the known tool names (none for chitchat);
- chitchat rows are answerable, and chitchat and unanswerable rows have an empty answer and gold;
- answerable non-chitchat rows have a non-empty answer and gold, every gold reference has the form
  ``path:Lstart-Lend`` with a path that exists under the KB folder and a 1-based inclusive range that
  lies inside the file, and the answer occurs (case-insensitive) in the text of the union of its gold
  ranges.

It prints every problem, then a count per complexity and answerability, and exits with status 1 when
anything failed (2 when the files cannot be read). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

FIELDS: tuple[str, ...] = ("id", "question", "complexity", "answerable", "answer", "gold", "tools")
COMPLEXITIES: tuple[str, ...] = ("chitchat", "simple", "complex")
TOOLS: frozenset[str] = frozenset({"vector_search", "keyword_search", "grep", "read_file", "jira_fetch"})
REF = re.compile(r"^(?P<path>[^:]+):L(?P<start>\d+)-L(?P<end>\d+)$")
ID = re.compile(r"^[a-z]\d{3,}$")


def read_lines(path: Path, cache: dict[Path, list[str]]) -> list[str]:
    """The lines of a KB file, read once and kept in ``cache``."""
    if path not in cache:
        cache[path] = path.read_text(encoding="utf-8").splitlines()
    return cache[path]


def check_gold(refs: list[Any], kb: Path, cache: dict[Path, list[str]]) -> tuple[list[str], str]:
    """Validate gold references; return (problems, text of the union of the valid ranges)."""
    problems: list[str] = []
    texts: list[str] = []
    kb_root = kb.resolve()
    for ref in refs:
        if not isinstance(ref, str):
            problems.append(f"gold entry {ref!r} is not a string")
            continue
        match = REF.match(ref)
        if match is None:
            problems.append(f"gold {ref!r} is not of the form path:Lstart-Lend")
            continue
        file = (kb / match["path"]).resolve()
        if not file.is_relative_to(kb_root) or not file.is_file():
            problems.append(f"gold {ref!r}: no file {match['path']!r} under {kb}")
            continue
        start, end = int(match["start"]), int(match["end"])
        lines = read_lines(file, cache)
        if not 1 <= start <= end <= len(lines):
            problems.append(f"gold {ref!r}: range outside 1..{len(lines)} or start after end")
            continue
        texts.append("\n".join(lines[start - 1 : end]))
    return problems, "\n".join(texts)


def check_row(row: Any, kb: Path, cache: dict[Path, list[str]]) -> list[str]:
    """All problems of one parsed row (an empty list when it is valid)."""
    if not isinstance(row, dict):
        return ["not a JSON object"]
    problems: list[str] = []
    if set(row) != set(FIELDS):
        missing, extra = sorted(set(FIELDS) - set(row)), sorted(set(row) - set(FIELDS))
        problems.append(f"fields differ: missing {missing}, unexpected {extra}")
        return problems
    types: dict[str, type] = {
        "id": str,
        "question": str,
        "complexity": str,
        "answerable": bool,
        "answer": str,
        "gold": list,
        "tools": list,
    }
    for name, kind in types.items():
        if not isinstance(row[name], kind):
            problems.append(f"{name} should be {kind.__name__}, got {type(row[name]).__name__}")
    if problems:
        return problems
    if not ID.match(row["id"]):
        problems.append(f"id {row['id']!r} is not a letter and three or more digits (a001, t001)")
    if not row["question"].strip():
        problems.append("empty question")
    if row["complexity"] not in COMPLEXITIES:
        problems.append(f"complexity {row['complexity']!r} not in {COMPLEXITIES}")
    unknown = [tool for tool in row["tools"] if tool not in TOOLS]
    if unknown:
        problems.append(f"unknown tools {unknown}")
    if len(set(map(str, row["tools"]))) != len(row["tools"]):
        problems.append("duplicate tools")
    chitchat = row["complexity"] == "chitchat"
    if chitchat and not row["answerable"]:
        problems.append("chitchat rows must be answerable")
    if chitchat and row["tools"]:
        problems.append("chitchat rows take no tools")
    if chitchat or not row["answerable"]:
        if row["answer"] or row["gold"]:
            problems.append("chitchat and unanswerable rows need an empty answer and an empty gold list")
        return problems
    if not row["answer"].strip():
        problems.append("answerable row without an answer")
    if not row["gold"]:
        problems.append("answerable row without gold references")
    if not row["tools"]:
        problems.append("answerable row without tools")
    gold_problems, text = check_gold(row["gold"], kb, cache)
    problems.extend(gold_problems)
    if row["answer"].strip() and not gold_problems and row["answer"].casefold() not in text.casefold():
        problems.append(f"answer {row['answer']!r} not found in its gold ranges")
    return problems


def summary(rows: list[dict[str, Any]]) -> str:
    """Counts per complexity, split into answerable and unanswerable."""
    counts = Counter((row.get("complexity"), bool(row.get("answerable"))) for row in rows)
    lines = [f"{'complexity':<10} {'answerable':>10} {'unanswerable':>12} {'total':>6}"]
    for complexity in COMPLEXITIES:
        yes, no = counts[(complexity, True)], counts[(complexity, False)]
        lines.append(f"{complexity:<10} {yes:>10} {no:>12} {yes + no:>6}")
    yes = sum(n for (_, answerable), n in counts.items() if answerable)
    no = sum(n for (_, answerable), n in counts.items() if not answerable)
    lines.append(f"{'all':<10} {yes:>10} {no:>12} {yes + no:>6}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Check the set; print problems and the summary; return 0 when valid, 1 on problems, 2 on unreadable input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("queries", nargs="?", default="data/kb_queries_test.jsonl", help="JSON-lines question set")
    parser.add_argument("kb", nargs="?", default="data/kb", help="knowledge base folder that gold paths are relative to")
    args = parser.parse_args(argv)
    queries, kb = Path(args.queries), Path(args.kb)
    if not queries.is_file() or not kb.is_dir():
        print(f"cannot read {queries} or {kb}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    failures = 0
    seen: Counter[str] = Counter()
    cache: dict[Path, list[str]] = {}
    for number, line in enumerate(queries.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            print(f"line {number}: blank line")
            failures += 1
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            print(f"line {number}: invalid JSON ({error})")
            failures += 1
            continue
        problems = check_row(row, kb, cache)
        if isinstance(row, dict):
            rows.append(row)
            seen[str(row.get("id"))] += 1
        for problem in problems:
            print(f"line {number} ({row.get('id') if isinstance(row, dict) else '?'}): {problem}")
        failures += bool(problems)
    for duplicate in sorted(key for key, n in seen.items() if n > 1):
        print(f"duplicate id {duplicate!r}")
        failures += 1
    print(summary(rows))
    print(f"{len(rows)} rows, {failures} with problems" if failures else f"{len(rows)} rows, all valid")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
