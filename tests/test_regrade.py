"""Regrading a recording (crag_lab.replay.regrade) and comparing graders on it (crag_lab.replay.compare)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _experiments import CASES, PLAN, REFINE_PLANS, items, mixed_experiment

from crag_lab import CragConfig, Lab
from crag_lab.errors import GraderError
from crag_lab.models import TaskModels
from crag_lab.records import round_grades
from crag_lab.replay import Experiment, compare_graders
from crag_lab.replay.compare import reliability
from crag_lab.replay.regrade import Graded, ModelGrader, grading_model
from crag_lab.testing import ScriptedLLM, StaticTool

ROOT = Path(__file__).resolve().parent.parent
KB_RECORDING = ROOT / "notebooks" / "recordings" / "kb_knowledge_base.jsonl"


def text_of(item: dict[str, Any]) -> str:
    """The text StaticTool gave each item of `_experiments`: its path without '.md', then ' text'."""
    return f"{item['path'][:-3]} text"


def tools() -> list[StaticTool]:
    return [StaticTool("vector_search", items(4, 0.5)), StaticTool("keyword_search",
                                                                      [items(4, 0.0, f"k{i}_") for i in range(24)])]


def grades_of(exp: Experiment) -> list[list[float]]:
    """Every round's grades: the grader's, or the shadow grades of a round the pre-filter skipped."""
    return [list(g[0]) if (g := round_grades(rnd)) else [] for rec in exp.records for rnd in rec["rounds"]]


def test_regrading_with_the_recorded_grader_reproduces_the_recording() -> None:
    exp, _ = mixed_experiment()
    regraded_records = []
    for (_qid, _q, _a, grades, _v, _g), rec in zip(CASES, exp.records, strict=True):
        one = Experiment(exp.config, [rec], exp.meta)
        # the same scripted grader, replies in the same order: the round's new items graded as one batch
        again = one.regrade(ScriptedLLM({"grade": grades or "[]"}), texts=text_of)
        regraded_records += again.records
        assert again.meta["grader"]["name"] == "scripted" and again.meta["grader"]["replaced"] == {"name": "scripted"}
    regraded = Experiment(exp.config, regraded_records, exp.meta)
    assert grades_of(regraded) == grades_of(exp)
    for a, b in zip(exp.records, regraded.records, strict=True):
        assert [(u["node"], u["prompt_tokens"], u["completion_tokens"]) for u in a["usage"]] == \
            [(u["node"], u["prompt_tokens"], u["completion_tokens"]) for u in b["usage"]]  # the same prompts
        assert [r["grader_tokens"] for r in a["rounds"]] == [r["grader_tokens"] for r in b["rounds"]]
    assert regraded.replay().queries == exp.replay().queries


def test_regrading_the_kb_recording_with_the_offline_grader_reproduces_its_grades() -> None:
    exp = Experiment.load(KB_RECORDING)
    sub = Experiment(exp.config, [r for r in exp.records if r["rounds"]][:4], exp.meta)
    again = sub.regrade("offline", texts=ROOT / "data" / "kb")
    assert grades_of(again) == grades_of(sub)
    assert again.meta["grader"]["calls"] == sum(r["grader_calls"] for rec in sub.records for r in rec["rounds"]) + \
        sum(len((r.get("shadow") or {}).get("usage", [])) for rec in sub.records for r in rec["rounds"])


def clear_or_borderline(question: str, text: str) -> float:
    """A grader that likes d0 and d1; for "clear answer" it is unsure of everything (0.5: REFINE)."""
    if question == "clear answer":
        return 0.5
    return 0.9 if text.split()[0] in ("d0", "d1") else 0.2


def real_run(qid: str, question: str, analyze: str, grader: Any) -> dict[str, Any]:
    """The question run for real, with ``grader`` grading inside the graph and the scripted rest."""
    rest = ScriptedLLM({"analyze": analyze, "plan": [PLAN, *REFINE_PLANS] * 3, "synthesize": "An answer [1]."})
    lab = Lab(tools(), llm=TaskModels({"grade": grading_model(grader)}, rest), config=CragConfig(model_retries=0))
    return lab.run([{"id": qid, "question": question}], shadow_grading=True).records[0]


def test_regrade_then_replay_equals_a_real_rerun_inside_the_recording() -> None:
    exp, _ = mixed_experiment()
    regraded = exp.regrade(clear_or_borderline, texts=text_of)
    report = regraded.replay()
    inside = [q for q in report.queries if q.outcome != "needs_rerun"]
    assert [q.id for q in report.queries if q.outcome == "needs_rerun"] == ["g1"]  # REFINE where it answered
    assert len(inside) == 6
    for q, (qid, question, analyze, _g, vscore, _gold) in zip(report.queries, CASES, strict=True):
        if q.outcome == "needs_rerun" or vscore != 0.5:
            continue
        real = real_run(qid, question, analyze, clear_or_borderline)
        rounds = real["rounds"]
        assert q.actions == [r["action"] for r in rounds], qid
        recorded = regraded.record(qid)["rounds"]
        for k, rnd in enumerate(rounds):  # the same items, the same grades, the same items kept
            assert [i["id"] for i in rnd["items"]] == [i["id"] for i in recorded[k]["items"]]
            assert [i["grader_score"] for i in rnd["items"]] == [i["grader_score"] for i in recorded[k]["items"]]
        assert q.items_kept == sum(len(r["kept"]) for r in rounds), qid
        assert q.outcome == ("GENERATE" if not rounds or rounds[-1]["action"] == "GENERATE" else "capped") \
            or q.complexity != "complex"
    # the query that leaves the recording: the real run refines, which the recording never did
    g1 = real_run("g1", "clear answer", CASES[2][2], clear_or_borderline)
    assert g1["rounds"][0]["action"] == "REFINE" and exp.record("g1")["rounds"][0]["action"] == "GENERATE"


def test_a_user_function_is_used_as_given() -> None:
    exp, _ = mixed_experiment()
    seen: list[tuple[str, str]] = []

    def by_length(question: str, text: str) -> float:
        seen.append((question, text))
        return len(text) / 100

    regraded = exp.regrade(by_length, texts=text_of)
    for rec in regraded.records:
        for rnd in rec["rounds"]:
            scores = [i["grader_score"] for i in rnd["items"]] if rnd["rule"] is None else rnd["shadow"]["scores"]
            assert scores == [len(text_of(i)) / 100 for i in rnd["items"]]
    new_items = sum(i["new"] for rec in exp.records for r in rec["rounds"] for i in r["items"])
    assert len(seen) == new_items == regraded.meta["grader"]["items_graded"]  # each new item once, none twice
    assert ("clear answer", "d0 text") in seen
    assert regraded.meta["grader"]["name"] == "by_length" and regraded.meta["grader"]["calls"] == 0
    assert regraded.meta["grader"]["regraded_at"].endswith("+00:00")
    # items, decisions and labels as recorded; the input experiment untouched
    for a, b in zip(exp.records, regraded.records, strict=True):
        assert a["labels"] == b["labels"]
        assert [(r["kept"], r["action"], [i["id"] for i in r["items"]]) for r in a["rounds"]] == \
            [(r["kept"], r["action"], [i["id"] for i in r["items"]]) for r in b["rounds"]]
    assert grades_of(exp) != grades_of(regraded) and "grader" not in exp.meta


@pytest.mark.parametrize(("bad", "what"), [
    (lambda q, t: math.nan, "nan"),
    (lambda q, t: 1.5, "1.5"),
    (lambda q, t: -0.1, "-0.1"),
    (lambda q, t: "0.7", "'0.7'"),
])
def test_a_grade_that_is_not_a_number_in_0_1_is_an_error_naming_the_item(bad: Any, what: str) -> None:
    exp, _ = mixed_experiment()
    with pytest.raises(GraderError, match=rf"gave {what} for item 'd0.md:L1-L2' of query 'g1'.*number in \[0, 1\]"):
        exp.regrade(bad, texts=text_of)


def test_a_grader_that_raises_is_an_error_naming_the_query_and_item() -> None:
    exp, _ = mixed_experiment()

    def flaky(question: str, text: str) -> float:
        if text == "d2 text" and question == "borderline answer":
            raise RuntimeError("server said 500")
        return 0.5

    with pytest.raises(GraderError, match=r"failed on item 'd2.md:L3-L4' of query 'g2': RuntimeError: server said 500"):
        exp.regrade(flaky, texts=text_of)
    with pytest.raises(GraderError, match=r"no text for item 'd0.md:L1-L2' of query 'g1'"):
        exp.regrade(lambda q, t: 0.5, texts={})
    with pytest.raises(GraderError, match=r"gave 3 grades for the 4 items of query 'g1'"):
        exp.regrade(_Three(), texts=text_of)
    with pytest.raises(ValueError, match="keeps item ids, not their texts"):
        exp.regrade(lambda q, t: 0.5)
    with pytest.raises(ValueError, match="unknown grader 'gpt'"):
        exp.regrade("gpt", texts=text_of)


class _Three:
    name = "three"

    def grade(self, question: str, items: Any, iteration: int) -> Graded:
        return Graded([0.5, 0.5, 0.5])


def test_a_model_that_keeps_failing_is_an_error_and_an_unparsed_reply_grades_half() -> None:
    exp, _ = mixed_experiment()
    with pytest.raises(GraderError, match=r"grader 'scripted' failed on query 'g1'.*ConnectionError: down"):
        exp.regrade(ModelGrader(ScriptedLLM({"grade": ConnectionError("down")}), retries=1, backoff_s=0.0),
                    texts=text_of)
    vague = exp.regrade(ScriptedLLM({"grade": "they all look fine"}), texts=text_of)
    assert {s for rnd in grades_of(vague) for s in rnd} == {0.5}  # the graph's fallback, and said so
    assert vague.meta["grader"]["parse_failures"] == sum(len(r["rounds"]) for r in exp.records)


def test_compare_graders_measures_each_against_the_gold_labels() -> None:
    exp, _ = mixed_experiment()
    gold = {question: set(g) for _, question, *_, g in CASES}
    graders = {"oracle": lambda q, t: 1.0 if t in gold[q] else 0.0, "flat": lambda q, t: 0.5}
    result = compare_graders(exp, graders, texts=lambda item: item["id"])  # the "text" is the id
    table = result.table.set_index("grader")
    assert table.loc["oracle", "auroc"] == 1.0 and table.loc["oracle", "agreement"] == 1.0
    assert table.loc["oracle", "ece"] == 0.0
    assert table.loc["flat", "auroc"] == 0.5
    share = result.labels.mean()
    assert table.loc["flat", "ece"] == pytest.approx(abs(0.5 - share))
    assert table.loc["flat", "agreement"] == pytest.approx(share)  # 0.5 >= 0.5: every item called gold
    assert table.loc["oracle", "best"] >= table.loc["flat", "best"]
    assert set(result.experiments) == {"oracle", "flat"}
    from matplotlib.figure import Figure

    lines = result.plot(Figure().subplots())
    assert [line.get_label().split()[0] for line in lines] == ["oracle", "flat"]


def test_the_spread_of_a_sampled_grader_over_repeats() -> None:
    exp, _ = mixed_experiment()
    rng = np.random.default_rng(0)
    result = compare_graders(exp, {"noisy": lambda q, t: float(rng.uniform(0.4, 0.6)), "fixed": lambda q, t: 0.3},
                             texts=text_of, repeats=4)
    table = result.table.set_index("grader")
    assert table.loc["fixed", "grade_sd"] == 0.0
    assert 0.02 < table.loc["noisy", "grade_sd"] < 0.1  # a uniform on a width of 0.2 has sd 0.058
    assert result.spread["noisy"].shape == result.labels.shape


def test_a_sampled_server_judge_can_go_without_a_fixed_seed() -> None:
    """openai_compatible sends seed 0 by default, and a seeded llama.cpp or vLLM repeats its sample even at a
    temperature above 0 (so the spread over repeats would read 0); seed=None sends no seed."""
    from crag_lab.cache import cache_identity
    from crag_lab.models import LlamaIndexModel
    from crag_lab.servers import openai_compatible

    seeded = openai_compatible("http://127.0.0.1:9/v1", "m", temperature=0.7, check=False)
    sampled = openai_compatible("http://127.0.0.1:9/v1", "m", temperature=0.7, seed=None, check=False)
    assert seeded.additional_kwargs == {"seed": 0}
    assert "seed" not in sampled.additional_kwargs
    assert cache_identity(LlamaIndexModel(seeded)) != cache_identity(LlamaIndexModel(sampled))


def test_a_deterministic_grader_s_spread_is_exactly_zero() -> None:
    exp, _ = mixed_experiment()
    # three equal 0.1s have a numpy mean of 0.10000000000000002 and so a std of 1.4e-17, not 0
    result = compare_graders(exp, {"fixed": lambda q, t: 0.1}, texts=text_of, repeats=3)
    assert result.table.set_index("grader").loc["fixed", "grade_sd"] == 0.0
    assert (result.spread["fixed"] == 0.0).all()


def test_the_repeats_of_a_llama_index_llm_share_one_adapter_so_the_server_is_warmed_up_once() -> None:
    from llama_index.core.llms import MockLLM

    from crag_lab.models import WARM_UP_PROMPT

    prompts: list[str] = []

    class Recording(MockLLM):
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            prompts.append(prompt)
            return super().complete(prompt, formatted=formatted, **kwargs)

    exp, _ = mixed_experiment()
    result = compare_graders(exp, {"mock": Recording(max_tokens=3)}, texts=text_of, repeats=3)
    grading = int(result.table.set_index("grader").loc["mock", "calls"])
    assert grading > 0
    assert prompts.count(WARM_UP_PROMPT) == 1  # one warm-up and one measured speed, not one per repeat
    assert len(prompts) == 1 + 3 * grading


def test_reliability_bins_and_ece() -> None:
    r = reliability(np.array([0.05, 0.05, 0.95, 0.95]), np.array([0, 1, 1, 1]), bins=10)
    assert r["count"][0] == 2 and r["count"][9] == 2
    assert r["share_gold"][0] == 0.5 and r["share_gold"][9] == 1.0
    assert float(r["ece"]) == pytest.approx((2 * 0.45 + 2 * 0.05) / 4)


def test_a_llama_index_llm_grades_through_the_line_up_and_a_cache_makes_the_second_regrade_free(tmp_path: Path) -> None:
    from llama_index.core.llms import MockLLM

    exp, _ = mixed_experiment()
    cache = tmp_path / "grades.sqlite"
    first = exp.regrade(MockLLM(max_tokens=3), texts=text_of, cache=cache)
    grading = [u for rec in first.records for u in rec["usage"] if u["node"] == "grade_evidence"]
    assert grading and not any(u.get("cached") for u in grading)
    assert first.meta["grader"]["calls"] == len(grading) + sum(
        len((r.get("shadow") or {}).get("usage", [])) for rec in first.records for r in rec["rounds"])
    assert {s for rnd in grades_of(first) for s in rnd} == {0.5}  # MockLLM echoes the prompt: no grades in it
    again = exp.regrade(MockLLM(max_tokens=3), texts=text_of, cache=cache)
    cached = [u for rec in again.records for u in rec["usage"] if u["node"] == "grade_evidence"]
    assert cached and all(u.get("cached") for u in cached)
    assert grades_of(again) == grades_of(first)


def test_on_the_kb_a_regrade_grades_every_round_it_replays_as_a_real_run_with_that_grader() -> None:
    """A word-overlap grader on four recorded KB questions: up to and including the round where replay says
    the run leaves the recording, the real run (offline model, the overlap grader inside the graph) saw the
    same items, gave them the same grades and took the same actions."""
    import re

    def overlap(question: str, text: str) -> float:
        words = {w for w in re.findall(r"[a-z0-9]+", question.lower()) if len(w) > 3}
        return round(len(words & set(re.findall(r"[a-z0-9]+", text.lower()))) / len(words), 3) if words else 0.0

    exp = Experiment.load(KB_RECORDING)
    sub = Experiment(exp.config, [r for r in exp.records if r["rounds"]][:4], exp.meta)
    lab = Lab.from_directory(ROOT / "data" / "kb", remote=False)
    regraded = sub.regrade(overlap, texts=lab.kb)
    assert grades_of(regraded) != grades_of(sub)
    lab.model = TaskModels({"grade": grading_model(overlap)}, lab.model)
    for q, rec in zip(regraded.replay().queries, regraded.records, strict=True):
        real = lab.record({"id": rec["id"], "question": rec["query"], "labels": {}}, config=exp.config)["rounds"]
        seen = len(q.actions)
        assert seen >= 1 and [r["action"] for r in real[:seen]] == q.actions, rec["id"]
        for mine, theirs in zip(rec["rounds"][:seen], real[:seen], strict=True):
            assert [(i["id"], i["grader_score"]) for i in mine["items"]] == \
                [(i["id"], i["grader_score"]) for i in theirs["items"]], rec["id"]
