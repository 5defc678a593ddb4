"""How many items per search would put a gold passage in front of the grader: the first round's recall by ``top_k``.

The offline planner's first round asks ``vector_search`` for ``top_k`` items and ``keyword_search`` for
``(top_k + 1) // 2`` (`crag_lab.offline.planner`). For each answerable, non-chitchat KB question with
gold locations, this finds the rank of the first item overlapping a gold location in each tool's
results, and counts the questions whose first round would hold one at each ``top_k`` in `DEPTHS`. It
measures retrieval only; what more items do to the answers is a ``crag-lab eval`` run with
``KB_AGENT_TOP_K`` set (docs/evaluation.md, "More evidence does not help this reader"). The tuning
split is where a depth would be chosen; the test split is only measured.

    .venv/bin/python bench/study_retrieval_depth.py      # writes docs/dev/retrieval_depth.md (+ .json)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from _common import KB, ROOT, log, publish

from crag_lab.eval import load_dataset
from crag_lab.lab import Lab

SPLITS = {"tuning": ROOT / "data" / "kb_queries.jsonl", "test": ROOT / "data" / "kb_queries_test.jsonl"}
DEPTHS = (5, 8, 10, 15, 20, 40)
OUT = ROOT / "docs" / "dev" / "retrieval_depth.md"


def first_gold(items: Sequence[Mapping[str, Any]], gold: Sequence[Any]) -> int | None:
    """The rank of the first item whose lines overlap a gold location, or None."""
    return next((rank for rank, item in enumerate(items)
                 if any(item.get("path") == g.path and int(item.get("line", 0)) <= g.end
                        and int(item.get("line_end", 0)) >= g.start for g in gold)), None)


def depths(lab: Lab, path: Any) -> dict[str, Any]:
    """Per depth, how many answerable questions' first round holds a gold passage."""
    tools = {name: lab.tools[name] for name in ("vector_search", "keyword_search")}
    queries = [q for q in load_dataset(path).queries if q.complexity != "chitchat" and q.answerable and q.gold]
    ranks = []
    for q in queries:
        found = {name: first_gold(json.loads(tool({"query": q.question, "top_k": max(DEPTHS)})), q.gold)
                 for name, tool in tools.items()}
        ranks.append((found["vector_search"], found["keyword_search"]))
    held = {k: sum(1 for v, b in ranks if (v is not None and v < k) or (b is not None and b < (k + 1) // 2))
            for k in DEPTHS}
    return {"questions": len(queries), "held": held}


def main() -> int:
    lab = Lab.from_directory(KB)
    result = {}
    for split, path in SPLITS.items():
        log(f"retrieval depth: {split}")
        result[split] = depths(lab, path)
    lines = ["# The first round's recall by items per search", "",
             "Written by `bench/study_retrieval_depth.py` (see its docstring). Answerable KB questions whose first "
             "round (`vector_search` at `top_k`, `keyword_search` at half of it) returns a gold passage; the "
             "default `top_k` is 5.", "",
             "| split | questions | " + " | ".join(f"top_k {k}" for k in DEPTHS) + " |",
             "|---|---|" + "---|" * len(DEPTHS)]
    for split, r in result.items():
        lines.append(f"| {split} | {r['questions']} | " + " | ".join(str(r["held"][k]) for k in DEPTHS) + " |")
    publish(OUT, "\n".join(lines) + "\n", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
