"""A small recorded experiment with every route, built from scripted models (shared by the lab tests)."""

from __future__ import annotations

from typing import Any

from crag_lab import CragConfig, Lab
from crag_lab.replay import Experiment
from crag_lab.testing import ScriptedLLM, StaticTool

COMPLEX = '{"complexity": "complex", "suggested_tools": ["vector_search"]}'
SIMPLE = '{"complexity": "simple", "suggested_tools": ["vector_search"]}'
CHITCHAT = '{"complexity": "chitchat"}'
PLAN = '[{"tool": "vector_search", "args": {"query": "q"}}]'
REFINE_PLANS = [f'[{{"tool": "keyword_search", "args": {{"query": "r{i}"}}}}]' for i in range(8)]


def items(n: int, vscore: float = 0.5, prefix: str = "d") -> list[dict[str, Any]]:
    return [{"text": f"{prefix}{i} text", "path": f"{prefix}{i}.md", "line": i + 1, "line_end": i + 2,
             "score": vscore} for i in range(n)]


def scripted_lab(analyze: str, grades: list[str] | str, *, vscore: float = 0.5, n: int = 4) -> tuple[Lab, ScriptedLLM]:
    """First plan calls vector_search, later plans keyword_search (new items each round)."""
    llm = ScriptedLLM({"analyze": analyze, "plan": [PLAN, *REFINE_PLANS] * 3, "grade": grades,
                       "synthesize": "An answer [1]."})
    keyword_batches = [items(n, 0.0, f"k{i}_") for i in range(24)]
    lab = Lab([StaticTool("vector_search", items(n, vscore)), StaticTool("keyword_search", keyword_batches)],
              llm=llm, config=CragConfig(model_retries=0))
    return lab, llm


# (id, question, analyze reply, grader replies, vector cosine, gold paths)
CASES: list[tuple[str, str, str, list[str] | str, float, list[str]]] = [
    ("c1", "hello there", CHITCHAT, [], 0.5, []),
    ("s1", "which port?", SIMPLE, [], 0.5, ["d0.md:L1-L2"]),
    ("g1", "clear answer", COMPLEX, ["[0.9, 0.8, 0.7, 0.75]"], 0.5, ["d0.md:L1-L2", "d1.md:L2-L3"]),
    ("g2", "borderline answer", COMPLEX, ["[0.75, 0.75, 0.75, 0.75]"], 0.5, ["d0.md:L1-L2"]),
    ("r1", "needs refining", COMPLEX, ["[0.6, 0.6, 0.6, 0.6]", "[0.9, 0.9, 0.9, 0.9]"], 0.5, ["d2.md:L3-L4"]),
    ("x1", "off topic first", COMPLEX, ["[0.1, 0.1, 0.2, 0.1]", "[0.8, 0.8, 0.9, 0.8]"], 0.5, []),
    ("f1", "high cosine", COMPLEX, ["[0.2, 0.1, 0.9, 0.1]"], 0.85, ["d2.md:L3-L4"]),
]


def mixed_experiment() -> tuple[Experiment, list[ScriptedLLM]]:
    """Seven queries: chitchat, simple, two GENERATE, REFINE→GENERATE, RE_RETRIEVE→GENERATE, a fast path."""
    records: list[dict[str, Any]] = []
    llms = []
    for qid, question, analyze, grades, vscore, gold in CASES:
        lab, llm = scripted_lab(analyze, grades, vscore=vscore)
        exp = lab.run([{"id": qid, "question": question, "gold": gold}], shadow_grading=True)
        records += exp.records
        llms.append(llm)
    return Experiment(CragConfig(model_retries=0), records, {"model": "scripted"}), llms
