"""Model-output fuzzing: the parsers of crag_lab/parsing.py, the plan fallback, citations, and the graph.

Every parser is fed arbitrary text (empty, truncated JSON, prose, code fences, NaN, negative and >1
scores, wrong lengths, deep nesting, ~1 MB strings): it never raises, and each node falls back exactly
as spec 002/003 say — grade: invalid ⇒ None ⇒ 0.5 for every item plus a warning audit; analyze:
unparseable ⇒ complexity None ⇒ the full pipeline; plan: unparseable ⇒ text extraction restricted to
``routing_plan.suggested_tools``. The graph-level properties run a real compiled graph with
`ScriptedLLM`. Hypothesis runs are bounded (``max_examples``) so the module takes seconds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crag_lab import CragConfig, build_graph
from crag_lab.citations import STATS_HEADER, finalize_answer
from crag_lab.graph import initial_state
from crag_lab.models import ModelReply, Task
from crag_lab.nodes.plan import REMOTE_TOOLS, fallback_calls
from crag_lab.nodes.tool_exec import split_result
from crag_lab.parsing import (
    COMPLEXITIES,
    parse_analysis,
    parse_grades,
    parse_plan,
    parse_single_grade,
    strip_stats_blocks,
)
from crag_lab.state import RoutingPlan
from crag_lab.testing import ScriptedLLM, StaticTool
from crag_lab.tools._patterns import extract_args

KNOWN_TOOLS = ["vector_search", "keyword_search", "grep", "read_file", "jira_fetch", "web_fetch"]
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GRAPH_FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MB = 1_000_000

# --- strategies: what a model might answer -----------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=6),
    max_leaves=10,
)
# Keys a parser looks for, with values of any type, so the strategies reach the validation code.
shaped_dicts = st.fixed_dictionaries(
    {},
    optional={
        "scores": st.lists(json_scalars, max_size=5) | json_scalars,
        "score": json_scalars,
        "complexity": st.sampled_from([*COMPLEXITIES, "CHITCHAT", " simple ", "tricky", ""]) | json_scalars,
        "query_type": json_scalars,
        "suggested_tools": st.lists(st.sampled_from([*KNOWN_TOOLS, "rm_rf", ""]) | json_scalars, max_size=5),
        "grep_keywords": st.lists(st.text(max_size=8) | json_scalars, max_size=10),
        "sub_questions": st.lists(json_scalars, max_size=3) | json_scalars,
        "tool": st.sampled_from(KNOWN_TOOLS) | json_scalars,
        "args": st.dictionaries(st.text(max_size=6), json_scalars, max_size=3) | json_scalars,
        "calls": json_values,
    },
)
score_lists = st.lists(
    st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5) | st.booleans() | st.none()
    | st.text(max_size=3),
    max_size=8,
)
PROSE = ["", "Sure! ", "Here are the scores:\n", "Passage [2] matters most. ", "I think", "```", "{", "[", "NaN"]


@st.composite
def model_outputs(draw: st.DrawFn) -> str:
    """Raw text as a model might produce it: JSON of any shape, maybe truncated, fenced, in prose."""
    payload = draw(
        st.one_of(
            st.text(max_size=200),
            json_values.map(json.dumps),
            shaped_dicts.map(json.dumps),
            st.lists(shaped_dicts, max_size=4).map(json.dumps),
            score_lists.map(json.dumps),
        )
    )
    if payload and draw(st.booleans()):  # truncated mid-way
        payload = payload[: draw(st.integers(0, len(payload) - 1))]
    if draw(st.booleans()):
        payload = f"```{draw(st.sampled_from(['', 'json', 'JSON', 'python']))}\n{payload}\n```"
    return draw(st.sampled_from(PROSE)) + payload + draw(st.sampled_from(["", " Hope this helps.", "\n[1]", "}"]))


huge_texts = st.builds(
    lambda piece, tail: (piece * (MB // len(piece) + 1))[:MB] + tail,
    st.text(min_size=1, max_size=8),
    st.sampled_from(["", "[0.5]", '{"complexity": "simple"}', "]", "```"]),
)
# Hand-written ~1 MB inputs: deep nesting, unterminated arrays, a valid answer buried past the scan limit.
HUGE = {
    "open brackets": "[" * MB,
    "open braces": '{"a":' * (MB // 5),
    "nested then valid": "[" * 5000 + " [0.5]",
    "unterminated array": "[" + "0.5, " * (MB // 5),
    "fenced nesting": "```json\n" + "[" * MB + "\n```",
    "prose then valid": "word " * (MB // 5) + "[0.5]",
    "huge integer": "[" + "9" * 5000 + "]",
    "many stats headers": "📊 LLM Usage Stats " * (MB // 20),
}


# --- grade: parse_grades / parse_single_grade ---------------------------------------------------


@FUZZ
@given(model_outputs(), st.integers(0, 8))
def test_parse_grades_never_raises_and_returns_exactly_n_scores_in_range_or_none(text: str, n: int) -> None:
    grades = parse_grades(text, n)
    if grades is not None:
        assert len(grades) == n
        assert all(isinstance(g, float) and 0.0 <= g <= 1.0 for g in grades)


@FUZZ
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
    st.text(alphabet=st.characters(blacklist_characters="[]{}`\\\""), max_size=60),
    st.sampled_from(["", "Looking at passages [2] and [3, 4]: ", "Scores (see [9]) are "]),
    st.booleans(),
)
def test_parse_grades_reads_valid_scores_through_prose_fences_and_bracket_references(
    scores: list[float], prose: str, refs: str, fenced: bool
) -> None:
    body = json.dumps(scores)
    text = f"{prose}```json\n{body}\n```" if fenced else f"{prose}{refs}{body} {prose}"
    assert parse_grades(text, len(scores)) == scores


@FUZZ
@given(score_lists, st.integers(0, 8), st.sampled_from(["", "Scores: ", "```json\n"]))
def test_parse_grades_rejects_any_wrong_length_or_out_of_range_list(values: list[Any], n: int, prefix: str) -> None:
    valid = len(values) == n and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and 0 <= v <= 1 for v in values
    )
    text = prefix + json.dumps(values) + ("\n```" if prefix.startswith("```") else "")
    expected = [float(v) for v in values] if valid else None
    assert parse_grades(text, n) == expected
    assert parse_grades(json.dumps({"scores": values}), n) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "not json", "[0.9, 0.8", "[NaN]", "[Infinity]", "[-0.1]", "[1.01]", "[true]", '["0.9"]', "[0.9, 0.8]",
     '{"scores": "high"}', '{"score": 0.9}', "[[0.9]]", "null", "0.9"],
)
def test_parse_grades_spec_invalid_outputs_give_none(text: str) -> None:
    # spec 002: output that is not N valid scores ⇒ None (the node then assigns 0.5 to all)
    assert parse_grades(text, 1 if text != "[0.9, 0.8]" else 3) is None


@FUZZ
@given(model_outputs() | st.floats(allow_nan=True).map(repr) | st.integers().map(str))
def test_parse_single_grade_never_raises_and_stays_in_range(text: str) -> None:
    score = parse_single_grade(text)
    assert score is None or (isinstance(score, float) and 0.0 <= score <= 1.0)


@pytest.mark.parametrize("name", sorted(HUGE))
def test_parsers_survive_pathological_megabyte_inputs(name: str) -> None:
    text = HUGE[name]
    grades = parse_grades(text, 1)
    assert grades is None or grades == [0.5]
    assert parse_single_grade(text) in (None, 0.5)
    assert parse_analysis(text, KNOWN_TOOLS)["complexity"] in (*COMPLEXITIES, None)
    assert parse_plan(text, KNOWN_TOOLS) is None
    assert text.startswith(strip_stats_blocks(text))
    body, cited = finalize_answer(text, [{"path": "a.md"}])
    assert STATS_HEADER not in body and len(cited) <= 1


@settings(max_examples=10, deadline=None)
@given(huge_texts)
def test_parsers_never_raise_on_megabyte_repetitions(text: str) -> None:
    grades = parse_grades(text, 1)
    assert grades is None or len(grades) == 1
    parse_single_grade(text)
    parse_analysis(text, KNOWN_TOOLS)
    parse_plan(text, KNOWN_TOOLS)
    stripped = strip_stats_blocks(text)
    assert text.startswith(stripped) and strip_stats_blocks(stripped) == stripped


def test_a_valid_answer_past_the_scan_limit_is_a_parse_failure_not_a_hang() -> None:
    # Parsers read at most the first 200 000 characters: the answer is None, the node falls back.
    assert parse_grades("x" * MB + "[0.5]", 1) is None


# --- analyze: parse_analysis ------------------------------------------------------------------


@FUZZ
@given(model_outputs())
def test_parse_analysis_never_raises_and_only_returns_known_values(text: str) -> None:
    plan = parse_analysis(text, KNOWN_TOOLS)
    assert plan["complexity"] in (*COMPLEXITIES, None)
    assert set(plan["suggested_tools"]) <= set(KNOWN_TOOLS)
    assert all(isinstance(k, str) and k for k in plan["grep_keywords"]) and len(plan["grep_keywords"]) <= 8
    assert all(isinstance(q, str) for q in plan["sub_questions"])
    assert isinstance(plan["query_type"], str)
    if "{" not in text:  # no JSON object at all: unparseable ⇒ classification unavailable
        assert plan["complexity"] is None and plan["parsed"] is False


@FUZZ
@given(st.sampled_from(COMPLEXITIES), st.sampled_from(["", "Sure. ", "I'd say {not json} but really: ", "Step [1]: "]))
def test_parse_analysis_finds_the_routing_object_after_prose_and_stray_braces(complexity: str, prose: str) -> None:
    text = prose + json.dumps({"complexity": complexity.upper(), "suggested_tools": ["grep", "nope"]})
    plan = parse_analysis(text, KNOWN_TOOLS)
    assert plan["complexity"] == complexity
    assert plan["suggested_tools"] == ["grep"]


# --- plan: parse_plan and the text fallback ------------------------------------------------------


@FUZZ
@given(model_outputs())
def test_parse_plan_never_raises_and_returns_only_known_tools_with_dict_args(text: str) -> None:
    calls = parse_plan(text, KNOWN_TOOLS)
    if calls is not None:
        assert calls, "a plan with no valid call must be None (so the node falls back)"
        for call in calls:
            assert call["tool"] in KNOWN_TOOLS
            assert isinstance(call["args"], dict)


queries = st.text(max_size=80) | st.sampled_from(
    ["Which port does the gateway use?", "Status of PAY-142?", "Summarise https://example.com/a", "open `MAX_RETRIES`",
     "what is in docs/setup.md", "pageId=4242", "UTF-8 vs ISO-8601"]
)


@FUZZ
@given(model_outputs(), queries, st.lists(st.sampled_from(KNOWN_TOOLS), unique=True, max_size=6))
def test_plan_fallback_only_extracts_suggested_tools_that_apply_to_the_query(
    text: str, query: str, suggested: list[str]
) -> None:
    # spec 003: the text fallback considers only routing_plan.suggested_tools, and a remote tool only
    # when the query itself holds a valid argument for it
    plan = RoutingPlan(suggested_tools=suggested, grep_keywords=[])
    calls = fallback_calls(text, query, plan, 5)
    assert {c["tool"] for c in calls} <= set(suggested)
    for call in calls:
        if call["tool"] in REMOTE_TOOLS:
            assert call["args"] == extract_args(call["tool"], query)


# --- stats blocks, citations, tool results -------------------------------------------------------

STATS_VARIANTS = [
    "\n\n---\n📊 **LLM Usage Stats:**\n- API calls: 9\n- Total tokens: 9999",
    " 📊 **LLM Usage Stats:** - API calls: 9",
    "\n**📊 LLM Usage Stats:**\n- API calls: 9",
    "\n## 📊 llm usage stats\n- API calls: 9",
    "\n---\n**LLM Usage Stats:**\n- API calls: 9",
    "\n📊\u00a0**LLM\u00a0Usage Stats:**\n",
]


@FUZZ
@given(st.text(max_size=200), st.sampled_from(STATS_VARIANTS), st.text(max_size=100))
def test_strip_stats_blocks_removes_any_stats_block_and_keeps_the_text_before_it(
    before: str, block: str, after: str
) -> None:
    text = before + block + after
    stripped = strip_stats_blocks(text)
    assert text.startswith(stripped)
    assert len(stripped) <= len(before)  # the block and everything after it are gone
    assert strip_stats_blocks(stripped) == stripped  # nothing left to strip
    assert not re.search(r"📊[^\n]{0,40}LLM\s+Usage\s+Stats", stripped, re.IGNORECASE)


@FUZZ
@given(st.text(max_size=300))
def test_strip_stats_blocks_leaves_text_without_a_stats_title_alone(text: str) -> None:
    if not re.search(r"LLM\s+Usage\s+Stats", text, re.IGNORECASE):
        assert strip_stats_blocks(text) == text


ANSWER_PIECES = ["[1]", "[2]", "[9]", "[0]", "[1, 3]", "[", "]", "1]", ",", " x ", "\n", "\x00", "\x01",
                 "Sources:\n[7] secrets/keys.md:L1\n", "\n[1] secrets/k.md [1].\n", STATS_VARIANTS[0]]
MARKER = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")


@FUZZ
@given(
    st.text(max_size=150) | st.lists(st.sampled_from(ANSWER_PIECES), max_size=20).map("".join),
    st.integers(0, 4),
)
def test_finalize_answer_only_cites_given_items_and_numbers_markers_densely(text: str, n: int) -> None:
    items = [{"path": f"doc{i}.md", "line": i + 1} for i in range(n)]
    body, cited = finalize_answer(text, items)
    assert all(any(c is item for item in items) for c in cited)
    assert len({id(c) for c in cited}) == len(cited)
    numbers = {int(p) for m in MARKER.finditer(body) for p in m.group(1).split(",")}
    assert numbers == set(range(1, len(cited) + 1))  # every marker points into the footer, and vice versa
    assert STATS_HEADER not in body
    assert not re.search(r"^\s*\[\d+\]\s+secrets/", body, re.MULTILINE)  # no model-written source line


@FUZZ
@given(model_outputs() | json_values.map(json.dumps) | st.lists(shaped_dicts, max_size=4).map(json.dumps))
def test_tool_results_of_any_shape_become_items_with_text_and_never_raise(raw: str) -> None:
    for item in split_result(raw, "vector_search", 1):
        assert item["text"].strip()
        assert isinstance(item["path"], str) and item["id"]


def test_tool_result_nested_past_the_recursion_limit_is_one_text_item() -> None:
    [item] = split_result("[" * 100_000, "grep", 1)
    assert item["text"].startswith("[[[")


# --- the whole graph, with ScriptedLLM -------------------------------------------------------------

COMPLEX = '{"query_type": "fact", "complexity": "complex", "suggested_tools": ["vector_search"]}'
VECTOR_PLAN = '[{"tool": "vector_search", "args": {"query": "gateway port", "top_k": 5}}]'
ITEMS = [{"text": f"Chunk {i}: the gateway listens on port 84{i}3.", "path": f"services/doc{i}.md", "line": 10 * i + 1,
          "line_end": 10 * i + 4, "score": 0.5} for i in range(4)]
RETRIEVED = {item["path"] for item in ITEMS}
GRAPH_TOOLS = ["vector_search", "keyword_search", "grep", "jira_fetch", "web_fetch"]
ROUTES = {
    "chitchat": ["analyze_and_route", "synthesize"],
    "simple": ["analyze_and_route", "plan", "tool_exec", "synthesize"],
    "complex": ["analyze_and_route", "plan", "tool_exec", "grade_evidence", "synthesize"],
}


class SlotModel:
    """Forwards to the `ScriptedLLM` of the current example, so one compiled graph serves every example."""

    name = "slot"

    def __init__(self) -> None:
        self.llm = ScriptedLLM({})

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        return self.llm.complete(task, prompt, inputs)


def fuzz_graph(**config: Any) -> tuple[SlotModel, Any, CragConfig]:
    cfg = CragConfig(**({"max_iterations": 1, "model_retries": 0} | config))
    slot = SlotModel()
    tools = [StaticTool(name, ITEMS) for name in GRAPH_TOOLS]
    return slot, build_graph(slot, tools, cfg), cfg


GRADE_SLOT, GRADE_GRAPH, GRADE_CFG = fuzz_graph()
ANALYZE_SLOT, ANALYZE_GRAPH, ANALYZE_CFG = fuzz_graph(max_iterations=3)
PLAN_SLOT, PLAN_GRAPH, PLAN_CFG = fuzz_graph()


def invoke(graph: Any, cfg: CragConfig, query: str = "Which port does the gateway use?") -> dict[str, Any]:
    return graph.invoke(initial_state(query), {"recursion_limit": cfg.recursion_limit})


def assert_one_stats_block_at_the_end(answer: str) -> None:
    assert answer.count(STATS_HEADER) == 1
    assert len(re.findall(r"LLM\s+Usage\s+Stats", answer, re.IGNORECASE)) == 1
    assert answer.split("\n---\n")[-1].startswith(STATS_HEADER)


def cited_paths(answer: str) -> list[str]:
    if "\n\nSources:\n" not in answer:
        return []
    footer = answer.rsplit("\n\nSources:\n", 1)[1].split("\n\n---\n")[0]
    return [re.sub(r":L\d+(?:-L\d+)?$", "", line.split(" ", 1)[1]) for line in footer.splitlines()]


@GRAPH_FUZZ
@given(
    model_outputs() | score_lists.map(json.dumps) | st.lists(st.floats(0, 1), min_size=4, max_size=4).map(json.dumps)
)
def test_any_grader_text_gives_scores_in_range_and_exactly_one_stats_block(grader_text: str) -> None:
    GRADE_SLOT.llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": grader_text,
                                  "synthesize": "It is 8403 [1]."})
    state = invoke(GRADE_GRAPH, GRADE_CFG)
    scores = state["evidence_scores"]
    assert len(scores) == len(ITEMS)
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
    parsed = parse_grades(grader_text, len(ITEMS))
    warnings = [e for e in state["audit"] if e["event"] == "grader_parse_failed"]
    if parsed is None:  # spec 002: parse failure ⇒ 0.5 for every item, and a warning in the audit log
        assert scores == [0.5] * len(ITEMS)
        assert [w["level"] for w in warnings] == ["warning"]
        assert state["rounds"][0]["parse_ok"] is False
    else:
        assert scores == parsed and warnings == []
    assert_one_stats_block_at_the_end(state["answer"])


@GRAPH_FUZZ
@given(model_outputs())
def test_any_analyze_text_routes_and_an_unparseable_one_takes_the_full_pipeline(analysis: str) -> None:
    ANALYZE_SLOT.llm = ScriptedLLM({"analyze": analysis, "plan": VECTOR_PLAN, "grade": "[0.9, 0.9, 0.9, 0.9]",
                                    "synthesize": "It is 8403 [1]."})
    state = invoke(ANALYZE_GRAPH, ANALYZE_CFG)
    complexity = parse_analysis(analysis, GRAPH_TOOLS)["complexity"]
    unavailable = [e for e in state["audit"] if e["event"] == "classification_unavailable"]
    if complexity is None:  # spec 003: classification unavailable ⇒ the full pipeline, audited
        assert state["routing_plan"]["complexity"] == "complex"
        assert len(unavailable) == 1
    else:
        assert state["routing_plan"]["complexity"] == complexity and unavailable == []
    assert state["path"] == ROUTES[complexity or "complex"]
    assert_one_stats_block_at_the_end(state["answer"])


@GRAPH_FUZZ
@given(model_outputs(), st.lists(st.sampled_from(["vector_search", "grep", "jira_fetch", "web_fetch"]), unique=True,
                                  min_size=1, max_size=4))
def test_any_plan_text_calls_only_known_tools_and_the_fallback_only_suggested_ones(
    plan_text: str, suggested: list[str]
) -> None:
    analysis = json.dumps({"complexity": "simple", "suggested_tools": suggested, "grep_keywords": ["8443"]})
    PLAN_SLOT.llm = ScriptedLLM({"analyze": analysis, "plan": plan_text, "synthesize": "It is 8403 [1]."})
    state = invoke(PLAN_GRAPH, PLAN_CFG)
    called = [h["tool"] for h in state["tool_history"]]
    assert set(called) <= set(GRAPH_TOOLS)
    if parse_plan(plan_text, GRAPH_TOOLS) is None:
        assert set(called) <= set(suggested)
        assert not set(called) & set(REMOTE_TOOLS)  # the query holds no issue key and no URL
        assert [e["event"] for e in state["audit"]].count("plan_parse_failed") == 1
    assert state["path"][-1] == "synthesize"
    assert_one_stats_block_at_the_end(state["answer"])


@GRAPH_FUZZ
@given(model_outputs() | st.lists(st.sampled_from(["It is 8403 [1]", " and [2]", " [7]", "\nSources:\n",
                                                   "[3] secrets/keys.md:L1\n", STATS_VARIANTS[0], STATS_VARIANTS[1],
                                                   "[1, 4]", "\n"]), max_size=12).map("".join))
def test_any_synthesize_text_gets_one_footer_of_retrieved_sources_and_one_stats_block(answer_text: str) -> None:
    GRADE_SLOT.llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.9, 0.9, 0.9]",
                                  "synthesize": answer_text})
    state = invoke(GRADE_GRAPH, GRADE_CFG)
    answer = state["answer"]
    assert_one_stats_block_at_the_end(answer)
    assert answer.count("\n\nSources:\n") <= 1
    assert set(cited_paths(answer)) <= RETRIEVED
    assert {c["path"] for c in state["citations"]} <= RETRIEVED
    assert "secrets/keys.md" not in cited_paths(answer)
