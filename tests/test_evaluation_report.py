"""scripts/evaluation_report.py: docs/evaluation.md from the eval runs' JSON, public sets only when run."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from crag_lab.eval.metrics import LOSS_STAGES

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evaluation_report", ROOT / "scripts" / "evaluation_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(containment: float, losses: dict[str, int]) -> dict[str, Any]:
    overall = {"n_queries": 10, "grader_auroc": 0.81234, "floor_precision": 0.5, "floor_recall": 0.25,
               "routing_accuracy": 0.95, "chitchat_recall": 1.0, "answer_containment": containment,
               "citation_precision": 0.9, "citation_recall": 0.4, "abstention_rate": 0.75,
               "false_abstention_rate": 0.1, "calls_per_query": 4.84, "tokens_per_query": 2948.6,
               "exact_match": 0.0, "answer_f1": 0.05, "fast_path": {"simple": 0.5}}
    modes = {m: {"overall": overall, "loss_stages": losses} for m in ("knowledge_base", "naive_rag", "per_item_grading")}
    return {"n_queries": 10, "modes": modes}


@pytest.fixture
def script(tmp_path: Path) -> ModuleType:
    module = _script()
    (tmp_path / "eval").mkdir()
    for name in ("evaluation.template.md", "public_sets.template.md", "test_split.template.md"):
        shutil.copy(ROOT / "docs" / "eval" / name, tmp_path / "eval" / name)
    module.DOCS, module.EVAL = tmp_path, tmp_path / "eval"  # type: ignore[attr-defined]
    return module


def test_numbers_and_verdicts_come_from_the_json(script: ModuleType, tmp_path: Path) -> None:
    losses = dict.fromkeys(LOSS_STAGES, 1) | {"dropped_by_grader": 4}
    (tmp_path / "evaluation.json").write_text(json.dumps(_result(0.539, losses)), encoding="utf-8")
    (tmp_path / "eval" / "kb_queries.md").write_text("### kb_queries\n\nKB REPORT BODY\n", encoding="utf-8")
    text = script.render()
    assert "| answer containment, answerable | ≥ 80 % | 53.9 % | missed, 26.1 points short |" in text
    assert "| abstention on unanswerable | ≥ 85 % | 75.0 % | missed, 10.0 points short |" in text
    assert "| false abstention on answerable | ≤ 10 % | 10.0 % | met |" in text
    assert "| containment gain over naive_rag at ≤ 5 calls / query | ≥ 10 points | +0.0 points, 4.8 calls |" in text
    assert "## The held-out test split" not in text  # no test-split run: no section
    assert "| grader AUROC | 0.812 | 0.812 | 0.812 |" in text and "| model calls / query | 4.8 |" in text
    assert "| dropped_by_grader | 4 | 4 | 4 |" in text and "(9 of them)" in text  # five stages at 1, one at 4
    assert "## The KB set\n\nKB REPORT BODY" in text
    assert "## The public sets" not in text  # no HotpotQA / SQuAD runs: no paragraph, no sections
    assert "{" not in text.split("## The KB set\n")[0]  # every placeholder filled


def test_public_sets_appear_when_both_were_run(script: ModuleType, tmp_path: Path) -> None:
    losses = dict.fromkeys(LOSS_STAGES, 2)
    (tmp_path / "evaluation.json").write_text(json.dumps(_result(0.75, losses)), encoding="utf-8")
    for name in ("hotpotqa_distractor_dev250", "squad2_dev250"):
        result = _result(0.31, losses)
        if name.startswith("hotpot"):
            for mode, f1 in (("knowledge_base", 0.12), ("naive_rag", 0.10)):
                result["modes"][mode] = dict(result["modes"][mode],
                                             by_question_kind={"bridge": {"n_queries": 8, "answer_f1": f1}})
        (tmp_path / "eval" / f"{name}.json").write_text(json.dumps(result), encoding="utf-8")
        (tmp_path / "eval" / f"{name}.md").write_text(f"### {name}\n\n{name} body\n", encoding="utf-8")
    text = script.render()
    assert "| answer containment, answerable | ≥ 80 % | 75.0 % | missed, 5.0 points short |" in text
    assert "## The public sets" in text and "Containment 31.0 %" in text
    assert "| HotpotQA token F1 on the 8 bridge questions | graded > naive_rag | 0.120 vs 0.100 | met |" in text
    assert "| SQuAD 2.0 abstention on unanswerable | ≥ 60 % | 75.0 % | met |" in text
    assert "AUROC of — on" in text  # the answerability study was not run here: no number invented
    assert text.index("## HotpotQA distractor") < text.index("## SQuAD 2.0") and "squad2_dev250 body" in text


def test_without_the_kb_run_it_says_what_to_run(script: ModuleType) -> None:
    with pytest.raises(SystemExit, match="make eval"):
        script.render()


def test_test_split_is_reported_beside_the_tuning_split_with_the_gap(script: ModuleType, tmp_path: Path) -> None:
    losses = dict.fromkeys(LOSS_STAGES, 1)
    (tmp_path / "evaluation.json").write_text(json.dumps(_result(0.80, losses)), encoding="utf-8")
    test = _result(0.70, losses)
    test["modes"]["naive_rag"]["overall"] = dict(test["modes"]["naive_rag"]["overall"], answer_containment=0.60)
    (tmp_path / "eval" / "kb_queries_test.json").write_text(json.dumps(test), encoding="utf-8")
    (tmp_path / "eval" / "kb_queries_test.md").write_text("### kb_queries_test\n\nTEST BODY\n", encoding="utf-8")
    text = script.render()
    assert "## The held-out test split" in text and "## The KB test split\n\nTEST BODY" in text
    assert "| answer containment | 80.0 % | 70.0 % | -10.0 | 80.0 % | 60.0 % | -20.0 |" in text
    assert "| answer containment, answerable | ≥ 70 % | 70.0 % | met |" in text
    assert "| containment gain over naive_rag | ≥ 5 points | +10.0 points, 4.8 calls | met |" in text


def test_grader_rows_give_the_interval_where_the_calibration_records_one(script: ModuleType, tmp_path: Path) -> None:
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"cross_validation": {
        "kb": {"how": "out of fold", "auroc": 0.896, "ece_even_odds": 0.061,
               "intervals": {"auroc_95": [0.863, 0.925], "ece_95": [0.05, 0.102]}},
        "hotpotqa": {"how": "held out", "auroc": 0.804, "ece_even_odds": 0.043},
        "pooled fitted": {"auroc": 0.959, "ece_even_odds": 0.032}}}), encoding="utf-8")
    script.CALIBRATION = calibration  # type: ignore[attr-defined]
    rows = script.grader_rows()
    assert ["grader AUROC, kb (out of fold)", "≥ 0.90", "0.896 (0.863–0.925)", "missed, 0.004 short"] in rows
    assert ["grader ECE at even odds, kb (out of fold)", "≤ 0.05", "0.061 (0.050–0.102)", "missed, 0.011 over"] in rows
    assert ["grader ECE at even odds, hotpotqa (held out)", "≤ 0.05", "0.043", "met"] in rows  # none recorded: none shown
    assert not [r for r in rows if "pooled" in r[0]]


def test_why_the_agent_abstains_sets_the_runs_side_by_side_with_totals(script: ModuleType, tmp_path: Path) -> None:
    kb = _result(0.75, dict.fromkeys(LOSS_STAGES, 2))
    zero = {"unanswerable": 0, "answerable": 0, "other": 0}
    kb["modes"]["knowledge_base"] = dict(kb["modes"]["knowledge_base"], abstentions={
        "no_evidence": zero, "names": {"unanswerable": 3, "answerable": 1, "other": 0},
        "negation": zero, "weak_best_unit": {"unanswerable": 2, "answerable": 4, "other": 1}})
    (tmp_path / "evaluation.json").write_text(json.dumps(kb), encoding="utf-8")
    text = script.render()
    section = text.split("## Why the agent abstains")[1].split("\n## ")[0]
    # one column per run that recorded its abstentions; causes no run had are left out; chitchat ("other") is not counted
    assert "| cause | tuning |" in section and "| names | 3 / 1 |" in section and "| weak_best_unit | 2 / 4 |" in section
    assert "| all | 5 / 5 |" in section and "| negation |" not in section and "| no_evidence |" not in section
    # a run from before the abstentions were recorded says so instead of inventing a table
    (tmp_path / "evaluation.json").write_text(json.dumps(_result(0.75, dict.fromkeys(LOSS_STAGES, 2))), encoding="utf-8")
    assert "no run records its abstentions: run `make eval`" in script.render()
