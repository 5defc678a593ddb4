"""One test per ``#### Scenario`` of spec 002 (corrective RAG) and spec 003 (synthesis, routing).

Each test is named after its scenario and asserts the scenario's THEN/AND lines on a real compiled
LangGraph graph, with a scripted model and canned tools.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from crag_lab import CragConfig, build_graph
from crag_lab.citations import STATS_HEADER
from crag_lab.graph import initial_state
from crag_lab.prompts import NO_EVIDENCE_ANSWER
from crag_lab.testing import ScriptedLLM, StaticTool

COMPLEX = '{"query_type": "fact", "complexity": "complex", "suggested_tools": ["vector_search"]}'
SIMPLE = '{"query_type": "fact", "complexity": "simple", "suggested_tools": ["vector_search"]}'
CHITCHAT = '{"query_type": "greeting", "complexity": "chitchat", "suggested_tools": []}'
VECTOR_PLAN = '[{"tool": "vector_search", "args": {"query": "gateway port", "top_k": 5}}]'


def chunks(n: int, score: float = 0.5, lines: bool = True) -> list[dict[str, Any]]:
    return [
        {"text": f"Chunk {i}: the gateway listens on port 84{i}3.", "path": f"services/doc{i}.md",
         "line": (10 * i + 1) if lines else None, "line_end": (10 * i + 4) if lines else None,
         "score": score, "title": f"Doc {i}"}
        for i in range(n)
    ]


def run(llm: ScriptedLLM, tools: list[Any], config: CragConfig | None = None, query: str = "Which port?",
        history: list[dict[str, str]] | None = None) -> dict[str, Any]:
    config = config or CragConfig()
    graph = build_graph(llm, tools, config)
    return graph.invoke(initial_state(query, history=history), {"recursion_limit": config.recursion_limit})


def events(state: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in state["audit"] if e["event"] == name]


def tasks(llm: ScriptedLLM) -> list[str]:
    return [c["task"] for c in llm.calls]


# --- spec 002: Grade each evidence item for relevance -------------------------------------------


def test_scenario_rule_read_file_results_auto_approve() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": '[{"tool": "read_file", "args": {"path": "a.md"}}]',
                       "synthesize": "It is 8403 [1]."})
    read = StaticTool("read_file", chunks(4))  # 4 items > auto_approve_max_items, so only read_file can fire
    state = run(llm, [read, StaticTool("vector_search", chunks(4))])
    assert state["grader_action"] == "GENERATE"
    assert state["evidence_scores"] == [1.0, 1.0, 1.0, 1.0]
    assert "grade" not in tasks(llm)
    [hit] = events(state, "fast_path_hit")
    assert hit["rule_name"] == "read_file"
    assert hit["path_type"] == "grader_prefilter"


def test_scenario_rule_few_context_items_auto_approve() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(2, score=0.2))])
    assert state["grader_action"] == "GENERATE"
    assert state["evidence_scores"] == [1.0, 1.0]
    assert "grade" not in tasks(llm)
    assert [e["rule_name"] for e in events(state, "fast_path_hit")] == ["few_context"]


def test_scenario_rule_high_vector_score_auto_approve() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "synthesize": "It is 8403 [1]."})
    items = chunks(4, score=0.85)
    state = run(llm, [StaticTool("vector_search", items)])
    assert state["grader_action"] == "GENERATE"
    assert state["evidence_scores"] == [1.0] * 4
    assert "grade" not in tasks(llm)
    assert [e["rule_name"] for e in events(state, "fast_path_hit")] == ["high_vector_score"]
    # the rule reads the scores tool_history recorded for vector_search
    assert state["tool_history"][0]["scores"] == [0.85] * 4


def test_scenario_no_rule_matched_fall_through_to_llm_grading() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.8, 0.85, 0.7]",
                       "synthesize": "It is 8403 [1]."})
    items = chunks(4, score=0.85)
    items[2]["score"] = 0.79  # one item under the 0.8 vector threshold: no rule applies
    state = run(llm, [StaticTool("vector_search", items)])
    assert tasks(llm).count("grade") == 1
    assert events(state, "fast_path_hit") == []
    assert state["evidence_scores"] == [0.9, 0.8, 0.85, 0.7]


def test_scenario_batch_relevance_grading() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.8, 0.75, 0.95, 0.7]",
                       "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(5))])
    grade_calls = llm.calls_for("grade")
    assert len(grade_calls) == 1  # all N items in a single call
    prompt = grade_calls[0]["prompt"]
    assert all(f"[{n}] services/doc{n - 1}.md" in prompt for n in range(1, 6))
    assert state["evidence_scores"] == [0.9, 0.8, 0.75, 0.95, 0.7]


@pytest.mark.parametrize("output", ["not json", "[0.9, 0.8]", "[0.9, 0.8, 1.7, 0.2, 0.1]", "", '{"scores": "high"}'])
def test_scenario_grading_with_parse_failure_fallback(output: str) -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": output, "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(5))], CragConfig(max_iterations=1))
    assert state["evidence_scores"] == [0.5] * 5
    [warning] = events(state, "grader_parse_failed")
    assert warning["level"] == "warning"
    assert warning["fallback"] == 0.5


# --- spec 002: Filter low-relevance evidence ---------------------------------------------------


def test_scenario_low_score_evidence_removed() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.29, 0.8, 0.3, 0.95]",
                       "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(5))])
    kept_paths = [item["path"] for item in state["context"]]
    assert "services/doc1.md" not in kept_paths  # 0.29 < 0.3
    assert "services/doc3.md" in kept_paths  # 0.3 is kept: the rule is "below 0.3"
    [removed] = events(state, "evidence_dropped")
    assert removed["path"] == "services/doc1.md"
    assert removed["score"] == 0.29


def test_scenario_all_evidence_below_threshold() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": ["[0.1, 0.2, 0.05]", "[0.9, 0.9, 0.9]"],
                       "synthesize": "It is 8403 [1]."})
    tools = [StaticTool("vector_search", chunks(3)), StaticTool("keyword_search", chunks(3))]
    state = run(llm, tools, CragConfig(auto_approve_max_items=0))
    first = state["rounds"][0]
    assert first["action"] == "RE_RETRIEVE"
    assert first["kept"] == []
    # instead of synthesizing with no evidence, the graph went back to analyze_and_route
    assert state["path"][:6] == ["analyze_and_route", "plan", "tool_exec", "grade_evidence", "analyze_and_route", "plan"]


# --- spec 002: Adaptive decision based on aggregate score ---------------------------------------


def test_scenario_high_quality_evidence_triggers_generate() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.7, 0.7, 0.7]",
                       "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(3))])
    assert state["grader_action"] == "GENERATE"  # average exactly 0.7
    assert state["path"][-2:] == ["grade_evidence", "synthesize"]


def test_scenario_mixed_quality_evidence_triggers_refine() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX,
                       "plan": [VECTOR_PLAN, '[{"tool": "keyword_search", "args": {"query": "gateway port refined"}}]'],
                       "grade": ["[0.6, 0.2, 0.5]", "[0.9, 0.9, 0.9]"], "synthesize": "It is 8403 [1]."})
    tools = [StaticTool("vector_search", chunks(3)),
             StaticTool("keyword_search", [{"text": f"More {i}", "path": f"more{i}.md", "line": 1} for i in range(3)])]
    state = run(llm, tools, CragConfig(auto_approve_max_items=0))
    first = state["rounds"][0]
    assert first["action"] == "REFINE"
    assert first["kept"] == ["services/doc0.md:L1-L4", "services/doc2.md:L21-L24"]  # items >= 0.3 retained
    assert state["path"][3:6] == ["grade_evidence", "plan", "tool_exec"]  # back to plan
    refine_prompt = llm.calls_for("plan")[1]["prompt"]
    assert "REFINE" in refine_prompt and "services/doc0.md:L1-L4" in refine_prompt
    # the retained items are still in context next round, beside the new ones
    assert [i["path"] for i in state["context"]][:2] == ["services/doc0.md", "services/doc2.md"]


def test_scenario_poor_evidence_triggers_re_retrieve() -> None:
    llm = ScriptedLLM({"analyze": [COMPLEX, COMPLEX], "plan": [VECTOR_PLAN, '[{"tool": "keyword_search", "args": {}}]'],
                       "grade": ["[0.1, 0.1, 0.1]", "[0.9, 0.9, 0.9]"], "synthesize": "It is 8403 [1]."})
    tools = [StaticTool("vector_search", chunks(3)), StaticTool("keyword_search", chunks(3, score=3.2))]
    state = run(llm, tools, CragConfig(auto_approve_max_items=0))
    assert state["rounds"][0]["action"] == "RE_RETRIEVE"
    assert state["path"][4] == "analyze_and_route"
    # the second analysis is told what was tried and must pick a different strategy
    assert "vector_search" in llm.calls_for("analyze")[1]["prompt"]
    [changed] = events(state, "strategy_changed")
    assert changed["chosen"] == ["keyword_search"]
    assert state["tool_history"][1]["tool"] == "keyword_search"


def test_scenario_max_iterations_reached_regardless_of_score() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": [VECTOR_PLAN, '[{"tool": "keyword_search", "args": {}}]'],
                       "grade": ["[0.5, 0.4, 0.35]", "[0.4, 0.45]"], "synthesize": "Low but usable [1] [3]."})
    tools = [StaticTool("vector_search", chunks(3)),
             StaticTool("keyword_search", [{"text": "x", "path": "k1.md", "line": 2}, {"text": "y", "path": "k2.md", "line": 9}])]
    state = run(llm, tools, CragConfig(max_iterations=2, auto_approve_max_items=0))
    assert state["iteration"] == 2
    assert state["grader_action"] == "REFINE"  # the action still says REFINE ...
    assert state["path"][-1] == "synthesize"  # ... but the cap routes to synthesize
    assert len(state["context"]) == 5  # all the (low-scored) evidence is used
    assert events(state, "max_iterations_reached")[0]["max_iterations"] == 2
    assert "Sources:" in state["answer"]


# --- spec 002: Pre-filter thresholds are configurable -------------------------------------------


def test_scenario_vector_score_threshold_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert CragConfig().vector_score_threshold == 0.8  # default when unset
    (tmp_path / ".env").write_text("KB_AGENT_VECTOR_SCORE_THRESHOLD=0.6\n", encoding="utf-8")
    config = CragConfig()
    assert config.vector_score_threshold == 0.6
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(4, score=0.65))], config)
    assert [e["rule_name"] for e in events(state, "fast_path_hit")] == ["high_vector_score"]
    monkeypatch.setenv("KB_AGENT_VECTOR_SCORE_THRESHOLD", "0.9")  # the environment beats .env
    assert CragConfig().vector_score_threshold == 0.9


def test_scenario_auto_approve_max_items_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert CragConfig().auto_approve_max_items == 2
    (tmp_path / ".env").write_text("KB_AGENT_AUTO_APPROVE_MAX_ITEMS=4\n", encoding="utf-8")
    config = CragConfig()
    assert config.auto_approve_max_items == 4
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(4))], config)
    assert [e["rule_name"] for e in events(state, "fast_path_hit")] == ["few_context"]
    assert "grade" not in tasks(llm)


# --- spec 003: Generate answers with source citations and LLM stats ------------------------------


def test_scenario_answer_with_inline_citations_and_llm_stats() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.8, 0.9]",
                       "synthesize": "The gateway uses 8403 [1] and 8413 [2]."})
    state = run(llm, [StaticTool("vector_search", [{**c, "line_end": c["line"]} for c in chunks(3)])])
    answer = state["answer"]
    assert "8403 [1] and 8413 [2]." in answer
    assert "[1] services/doc0.md:L1\n[2] services/doc1.md:L11" in answer
    _body, stats = answer.split("\n---\n")
    assert stats.startswith(STATS_HEADER)
    assert answer.rstrip().endswith(stats.rstrip())  # at the very end
    assert "- API calls: 4" in stats
    assert re.search(r"- Total tokens: \d+", stats)
    assert re.search(r"  - grade_evidence: 1 call, \d+ tokens, \d+ ms", stats)


def test_scenario_evidence_without_line_number_metadata() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.8, 0.9]",
                       "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(3, lines=False))])
    footer = state["answer"].split("Sources:\n")[1].split("\n\n---")[0]
    assert footer == "[1] services/doc0.md"


def test_scenario_no_evidence_available_for_synthesis() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.1, 0.1, 0.1]"})
    state = run(llm, [StaticTool("vector_search", chunks(3))], CragConfig(max_iterations=1, auto_approve_max_items=0))
    answer = state["answer"]
    assert answer.startswith(NO_EVIDENCE_ANSWER + "\n\n---\n" + STATS_HEADER)
    assert "Sources:" not in answer
    assert "synthesize" not in tasks(llm)  # nothing to synthesize from: no model call
    assert "- API calls: 3" in answer  # the cost of the unanswerable query is still shown


def test_scenario_llm_hallucinates_previous_stats() -> None:
    old_stats = "\n\n---\n📊 **LLM Usage Stats:**\n- API calls: 9\n- Total tokens: 9999"
    history = [{"role": "user", "content": "Which port?"}, {"role": "assistant", "content": "8403 [1]." + old_stats}]
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.8, 0.9]",
                       "synthesize": "It is 8403 [1]." + old_stats})
    state = run(llm, [StaticTool("vector_search", chunks(3))], history=history)
    assert all("LLM Usage Stats" not in call["prompt"] for call in llm.calls)
    assert "8403 [1]." in llm.calls_for("synthesize")[0]["prompt"]  # the history itself is kept
    assert state["answer"].count("LLM Usage Stats") == 1
    assert "9999" not in state["answer"]
    assert "- API calls: 4" in state["answer"]


# --- spec 003: Answer queries via Agentic RAG ----------------------------------------------------


def test_scenario_chitchat_query_fast_path() -> None:
    llm = ScriptedLLM({"analyze": CHITCHAT, "synthesize": "Hello! Ask me about the handbook."})
    search = StaticTool("vector_search", chunks(3))
    state = run(llm, [search], query="hi there!")
    assert state["path"] == ["analyze_and_route", "synthesize"]
    assert tasks(llm) == ["analyze", "synthesize"]  # 2 LLM calls
    assert search.calls == []
    assert "Sources:" not in state["answer"]
    assert "- API calls: 2" in state["answer"]


def test_scenario_simple_query_fast_path() -> None:
    llm = ScriptedLLM({"analyze": SIMPLE, "plan": VECTOR_PLAN, "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(5))])
    assert state["path"] == ["analyze_and_route", "plan", "tool_exec", "synthesize"]
    assert tasks(llm) == ["analyze", "plan", "synthesize"]  # 3 LLM calls, no grading
    assert "- API calls: 3" in state["answer"]


@pytest.mark.parametrize("analysis", [COMPLEX, "I think this is a hard one.", '{"complexity": "tricky"}'])
def test_scenario_complex_query_full_pipeline(analysis: str) -> None:
    llm = ScriptedLLM({"analyze": analysis, "plan": VECTOR_PLAN, "grade": "[0.9, 0.2, 0.8, 0.9]",
                       "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(4))])
    assert state["path"] == ["analyze_and_route", "plan", "tool_exec", "grade_evidence", "synthesize"]
    assert state["evidence_scores"] == [0.9, 0.2, 0.8, 0.9]
    assert state["grader_action"] == "GENERATE"
    if analysis != COMPLEX:  # classification unavailable ⇒ full pipeline, audited
        assert events(state, "classification_unavailable")


def test_scenario_vector_search_returns_multiple_chunks() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.8, 0.9, 0.7, 0.8]",
                       "synthesize": "It is 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(5))])
    first_round = state["rounds"][0]
    assert len(first_round["items"]) == 5  # 5 distinct items, not one merged string
    assert len({i["id"] for i in first_round["items"]}) == 5
    assert len(llm.calls_for("grade")) == 1  # 5 > auto_approve_max_items: the grader ran
    assert "JSON array of 5 scores" in llm.calls_for("grade")[0]["prompt"]


def test_scenario_user_queries_a_technical_term_requiring_context() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.8, 0.9]",
                       "synthesize": "The gateway listens on 8403 [1]."})
    state = run(llm, [StaticTool("vector_search", chunks(3))], query="What is the gateway admin port?")
    assert state["path"][0] == "analyze_and_route"  # intent and complexity first
    assert state["routing_plan"]["complexity"] == "complex"
    assert state["tool_history"][0]["tool"] == "vector_search"  # calls follow the routing plan
    assert "[1] services/doc0.md:L1-L4" in state["answer"]


def test_scenario_plan_node_respects_routing_plan_in_fallback_paths() -> None:
    analysis = json.dumps({"complexity": "simple", "suggested_tools": ["vector_search", "grep", "jira_fetch", "web_fetch"],
                           "grep_keywords": []})
    llm = ScriptedLLM({"analyze": analysis,
                       "plan": "I would use keyword_search, vector_search, jira_fetch and web_fetch here.",
                       "synthesize": "It is 8403 [1]."})
    tools = [StaticTool(name, chunks(2)) for name in
             ("vector_search", "keyword_search", "grep", "jira_fetch", "confluence_fetch", "web_fetch")]
    state = run(llm, tools, query="Which port does the gateway use?")
    [failure] = events(state, "plan_parse_failed")
    called = [h["tool"] for h in state["tool_history"]]
    assert called == ["vector_search"]  # keyword_search was not suggested; jira/web have no valid argument
    assert failure["extracted"] == ["vector_search"]
    # with a valid issue key in the query, jira_fetch becomes applicable
    llm2 = ScriptedLLM({"analyze": analysis, "plan": "use jira_fetch", "synthesize": "Done [1]."})
    state2 = run(llm2, tools, query="What is the status of PAY-142?")
    assert [(h["tool"], h["args"]) for h in state2["tool_history"]] == [("jira_fetch", {"key": "PAY-142"})]
