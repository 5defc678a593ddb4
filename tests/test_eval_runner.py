"""`evaluate` end to end on a fake model and canned tools: every mode, every metric, the report."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from crag_lab import CragConfig, Lab, ModelReply
from crag_lab.eval import EvalQuery, EvalSet, Evaluation, GoldRef, evaluate, mode_setup
from crag_lab.eval.cli import add_eval_parser
from crag_lab.prompts import NO_EVIDENCE_ANSWER
from crag_lab.replay import Experiment
from crag_lab.testing import StaticTool

ITEMS = [
    {"text": "The gateway listens on port 8443.", "path": "gw.md", "line": 1, "line_end": 3, "score": 0.5},
    {"text": "Unrelated text about lunch.", "path": "x.md", "line": 1, "line_end": 2, "score": 0.4},
    {"text": "Ports are numbers.", "path": "y.md", "line": 5, "line_end": 6, "score": 0.3},
]
ROUTES = {"Which port does the gateway use?": "complex", "hello": "chitchat", "Who is the DPO?": "simple"}


class FakeModel:
    """Routes by a table, grades by keyword (8443 ⇒ 0.9, "Ports" ⇒ 0.6, else 0.1), answers extractively."""

    name = "fake"

    def complete(self, task: str, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        query = str(inputs.get("query", ""))
        if task == "analyze":
            text = json.dumps({"complexity": ROUTES[query], "suggested_tools": ["vector_search"]})
        elif task == "plan":
            text = json.dumps([{"tool": "vector_search", "args": {"query": query}}])
        elif task == "grade":
            texts = [str(i["text"]) for i in inputs["items"]]
            text = json.dumps([0.9 if "8443" in t else 0.6 if "Ports" in t else 0.1 for t in texts])
        elif inputs.get("kind") in ("chitchat", "normal"):
            text = "Hello!"
        elif "DPO" in query:
            text = NO_EVIDENCE_ANSWER
        else:
            text = "The gateway listens on port 8443 [1]."
        return ModelReply(text, 10, 2)


def dataset() -> EvalSet:
    return EvalSet("tiny", [
        EvalQuery("q1", "Which port does the gateway use?", ("8443",), True, "complex", (GoldRef("gw.md", 2, 2),),
                  kind="bridge"),
        EvalQuery("q2", "hello", (), True, "chitchat"),
        EvalQuery("q3", "Who is the DPO?", (), False, "simple"),
    ], Path("tiny.jsonl"), kb=Path("kb"))


@pytest.fixture(scope="module")
def ev() -> Evaluation:
    lab = Lab([StaticTool("vector_search", ITEMS)], llm=FakeModel(), config=CragConfig(model_retries=0))
    return evaluate(lab, dataset(), modes=["knowledge_base", "naive_rag", "per_item_grading"])


def test_mode_setup_names_the_valid_modes() -> None:
    assert mode_setup("naive_rag", CragConfig())[0] == "naive_rag"
    with pytest.raises(ValueError, match="per_item_grading"):
        mode_setup("fancy", CragConfig())


def test_knowledge_base_metrics(ev: Evaluation) -> None:
    kb = ev.metrics("knowledge_base")
    assert kb["n_queries"] == 3
    assert kb["graded_items"] == 3 and kb["gold_items"] == 1  # only the complex question is graded
    assert kb["grader_auroc"] == 1.0
    assert (kb["floor_precision"], kb["floor_recall"]) == (0.5, 1.0)  # 0.9 and 0.6 kept, one is gold
    assert kb["grader_ece"] == pytest.approx((abs(0.9 - 1) + abs(0.6 - 0) + abs(0.1 - 0)) / 3)
    assert kb["routing_accuracy"] == 1.0 and kb["chitchat_recall"] == 1.0
    assert kb["answer_containment"] == 1.0
    # "gateway listens on port 8443" after normalising: 1 of 5 tokens is the gold "8443"
    assert kb["exact_match"] == 0.0 and kb["answer_f1"] == pytest.approx(2 * (1 / 5) / (1 / 5 + 1))
    assert kb["citation_precision"] == 1.0 and kb["citation_recall"] == 1.0 and kb["retrieval_recall"] == 1.0
    assert kb["abstention_rate"] == 1.0 and kb["false_abstention_rate"] == 0.0
    assert kb["calls_per_query"] == pytest.approx((4 + 2 + 3) / 3)  # complex, chitchat, simple
    assert kb["tokens_per_query"] == pytest.approx(12 * (4 + 2 + 3) / 3)
    assert kb["fast_path"]["chitchat"] == pytest.approx(1 / 3) and kb["fast_path"]["simple"] == pytest.approx(1 / 3)
    assert kb["fast_path"]["few_context"] == 0.0


def test_per_route_and_per_complexity_slices(ev: Evaluation) -> None:
    by_route = ev.metrics("knowledge_base", by="route")
    assert set(by_route) == {"GENERATE", "chitchat", "simple"}
    assert by_route["GENERATE"]["grader_auroc"] == 1.0 and by_route["simple"]["grader_auroc"] is None
    assert by_route["simple"]["abstention_rate"] == 1.0
    by_label = ev.metrics("knowledge_base", by="complexity")
    assert by_label["chitchat"]["calls_per_query"] == 2
    by_kind = ev.metrics("knowledge_base", by="question_kind")  # only q1 has a kind
    assert set(by_kind) == {"bridge"} and by_kind["bridge"]["n_queries"] == 1
    assert by_kind["bridge"]["graded_items"] == 3  # its items and rounds follow it into the slice
    with pytest.raises(ValueError, match="grouping"):
        ev.metrics("knowledge_base", by="color")
    with pytest.raises(ValueError, match="no run in mode"):
        ev.metrics("normal")


def test_naive_rag_has_no_grader_and_no_routing(ev: Evaluation) -> None:
    naive = ev.metrics("naive_rag")
    assert naive["graded_items"] == 0 and naive["grader_auroc"] is None and naive["floor_precision"] is None
    assert naive["routing_accuracy"] is None and naive["fast_path"]["chitchat"] is None
    assert naive["calls_per_query"] == 1.0  # synthesize only
    assert naive["abstention_rate"] == 1.0 and naive["answer_containment"] == 1.0


def test_per_item_grading_grades_every_question_one_call_per_item(ev: Evaluation) -> None:
    per_item = ev.metrics("per_item_grading")
    assert per_item["routing_accuracy"] is None  # routing is off, nothing to score
    assert per_item["grader_calls_per_query"] == 3.0  # three items, one call each, for every question
    assert per_item["graded_items"] == 9 and per_item["gold_items"] == 1
    assert set(ev.queries.loc[ev.queries["mode"] == "per_item_grading", "route"]) == {"GENERATE"}
    rules = ev.rounds.loc[ev.rounds["mode"] == "per_item_grading", "rule"]
    assert rules.isna().all()  # no pre-filter


def test_tidy_tables_and_summary(ev: Evaluation) -> None:
    assert len(ev.queries) == 9 and set(ev.queries["mode"]) == set(ev.modes)
    row = ev.queries[(ev.queries["mode"] == "knowledge_base") & (ev.queries["id"] == "q1")].iloc[0]
    assert row["route"] == "GENERATE" and row["contained"] and row["answer"].startswith("The gateway")
    assert {"score", "gold", "kept", "source"} <= set(ev.items.columns)
    summary = ev.summary()
    assert list(summary["mode"]) == ev.modes and "grader_auroc" in summary.columns
    assert set(ev.summary(by="route")["route"]) >= {"GENERATE", "chitchat", "simple", "naive_rag"}


def test_json_and_markdown_outputs(ev: Evaluation) -> None:
    out = ev.to_json(command="crag-lab eval --dataset tiny.jsonl")
    for key in ("grader_auroc", "floor_precision", "floor_recall", "routing_accuracy", "answer_containment",
                "citation_precision", "abstention_rate", "false_abstention_rate", "calls_per_query",
                "tokens_per_query"):
        assert key in out
    assert out["mode"] == "knowledge_base" and set(out["modes"]) == set(ev.modes)
    assert out["modes"]["knowledge_base"]["routing_confusion"]["chitchat"]["chitchat"] == 1
    json.dumps(out)
    md = ev.to_markdown(command="crag-lab eval --dataset tiny.jsonl")
    assert "| grader AUROC" in md and "crag-lab eval --dataset tiny.jsonl" in md
    assert "Routing confusion" in md and "By route, `knowledge_base`" in md


def test_loss_stages_follow_the_gold_passage_through_the_pipeline(ev: Evaluation) -> None:
    # q1 is the one answerable question with gold: answered in every mode; the others cannot say.
    for mode in ev.modes:
        assert ev.loss_stages(mode) == {"answered": 1, "not_retrieved": 0, "dropped_by_grader": 0, "abstained": 0,
                                        "not_cited": 0, "not_quoted": 0}
    assert ev.to_json()["modes"]["naive_rag"]["loss_stages"]["answered"] == 1
    assert "| dropped_by_grader |" in ev.to_markdown()


def test_a_gold_passage_below_the_floor_is_lost_at_the_grader() -> None:
    class DropsGold(FakeModel):
        def complete(self, task: str, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
            if task == "grade":  # the gold passage scores under the 0.3 floor, the others above it
                return ModelReply(json.dumps([0.1 if "8443" in str(i["text"]) else 0.6 for i in inputs["items"]]), 5, 2)
            if task == "synthesize" and inputs.get("kind", "answer") == "answer":
                return ModelReply("Ports are numbers [1].", 5, 2)
            return super().complete(task, prompt, inputs)

    lab = Lab([StaticTool("vector_search", ITEMS)], llm=DropsGold(), config=CragConfig(model_retries=0))
    run = evaluate(lab, dataset(), modes=["knowledge_base", "naive_rag"])
    assert run.loss_stages("knowledge_base")["dropped_by_grader"] == 1
    # No grader: the gold passage reached the synthesizer as [1] and was cited, without the answer quoted.
    assert run.loss_stages("naive_rag")["not_quoted"] == 1


def test_from_experiments_rescores_saved_runs(ev: Evaluation, tmp_path: Path) -> None:
    path = ev.experiments["knowledge_base"].save(tmp_path / "kb.jsonl")
    again = Evaluation.from_experiments(dataset(), {"knowledge_base": Experiment.load(path)})
    assert again.metrics()["grader_auroc"] == ev.metrics("knowledge_base")["grader_auroc"]
    other = EvalSet("other", [EvalQuery("zz", "?")], Path("o.jsonl"))
    with pytest.raises(ValueError, match="lacks"):
        Evaluation.from_experiments(other, {"knowledge_base": Experiment.load(path)})


def test_cli_parser_registers_eval() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_eval_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["eval", "--dataset", "d.jsonl", "--mode", "naive_rag", "--mode", "per_item_grading",
                              "--limit", "5", "--json", "out.json"])
    assert args.mode == ["naive_rag", "per_item_grading"] and args.limit == 5 and args.json_out == "out.json"
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "--dataset", "d.jsonl", "--mode", "fancy"])
