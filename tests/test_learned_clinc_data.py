"""CLINC150's queries as router messages (crag_lab/learned/clinc_data.py) and ``train_router --clinc``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag_lab.learned import clinc_data
from crag_lab.learned.router_data import held_out
from tests.test_learned_router import _tiny_corpus_run

_INTENTS = ("greeting", "thank_you", "report_lost_card", "pto_balance", "change_volume", "yes", "oos")


def _clinc(path: Path, per_intent: int = 60) -> Path:
    """A file shaped like CLINC150's data/data_full.json; its queries are written for this test."""
    def rows(intents: tuple[str, ...], start: int) -> list[list[str]]:
        return [[f"{intent.replace('_', ' ')} query number {start + i}", intent] for intent in intents for i in range(per_intent)]

    task = tuple(i for i in _INTENTS if i != "oos")
    raw = {"train": rows(task, 0), "val": rows(task, 1000), "test": [["greeting query number 0", "report_lost_card"]],
           "oos_train": rows(("oos",), 0), "oos_val": [], "oos_test": []}
    raw.update({name: [] for name in clinc_data.SPLITS if name not in raw})
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def test_small_talk_and_yes_no_are_chitchat_tasks_and_out_of_scope_simple_settings_left_out(tmp_path: Path) -> None:
    messages = clinc_data.read(_clinc(tmp_path / "c.json"))
    by_text = {m.text: m for m in messages}
    assert by_text["greeting query number 3"].label == "chitchat" and by_text["yes query number 1000"].label == "chitchat"
    assert by_text["thank you query number 5"].label == "chitchat"
    assert by_text["report lost card query number 2"].label == "simple" and by_text["oos query number 7"].label == "simple"
    assert not any(m.text.startswith("change volume") for m in messages)  # a command to the assistant about itself
    assert by_text["pto balance query number 1"].group == "clinc/pto_balance"
    assert by_text["oos query number 7"].group == "clinc/oos/oos query number 7"  # out of scope: held out one by one
    assert clinc_data.SMALL_TALK <= clinc_data.CHITCHAT and not clinc_data.CHITCHAT & clinc_data.META


def test_the_split_holds_out_whole_intents_caps_task_intents_and_drops_a_text_under_two_classes(tmp_path: Path) -> None:
    messages = clinc_data.read(_clinc(tmp_path / "c.json", per_intent=60))
    train, val = clinc_data.split(messages, seed=13)
    assert train == clinc_data.split(messages, seed=13)[0]
    assert all(held_out(m.group) for m in val) and not any(held_out(m.group) for m in train)
    assert not {m.text for m in train} & {m.text for m in val}
    per_group: dict[str, int] = {}
    for m in train:
        per_group[m.group] = per_group.get(m.group, 0) + 1
    task_groups = [g for g in per_group if g in ("clinc/report_lost_card", "clinc/pto_balance")]
    assert task_groups and all(per_group[g] == clinc_data.SIMPLE_PER_INTENT for g in task_groups)  # 120 written, 40 drawn
    assert all(per_group[g] > clinc_data.SIMPLE_PER_INTENT for g in ("clinc/greeting", "clinc/yes") if g in per_group)
    assert "greeting query number 0" not in {m.text.lower().rstrip("?") for m in train + val}  # written under two intents


def test_a_file_that_is_not_clinc_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--clinc .*not a readable JSON file.*data_full.json"):
        clinc_data.read(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text('{"train": [["only a query"]]}', encoding="utf-8")
    with pytest.raises(SystemExit, match=r"expected splits of \[query, intent\] pairs"):
        clinc_data.read(tmp_path / "other.json")


def test_train_router_adds_the_queries_to_the_head_and_to_the_token_reader_s_messages(tmp_path: Path) -> None:
    file = _clinc(tmp_path / "c.json", per_intent=8)
    trained, dumped = _tiny_corpus_run(tmp_path, "--clinc", str(file))
    assert trained["train"]["counts"]["chitchat"]["clinc/chitchat"] > 0
    assert trained["train"]["counts"]["simple"]["clinc/simple"] > 0
    assert len(trained["clinc"]["texts_sha256"]) == 64 and trained["clinc"]["left_out"] == sorted(clinc_data.META)
    corpus_train, _ = clinc_data.split(clinc_data.read(file), seed=13)
    assert len(dumped) == 5 + len(corpus_train)  # five of the others replayed, the corpus's all
    assert {m.text for m in corpus_train} <= set(dumped)
