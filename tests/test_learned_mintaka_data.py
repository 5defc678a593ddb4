"""Mintaka's translated questions as router messages (crag_lab/learned/mintaka_data.py) and ``train_router --mintaka``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag_lab.learned import mintaka_data
from crag_lab.learned.router_data import held_out
from tests.test_learned_router import _tiny_corpus_run

_KINDS = ("generic", "multihop", "yesno", "count", "comparative")


def _mintaka(path: Path, n: int = 40) -> Path:
    """A file shaped like Mintaka's data/mintaka_dev.json; written for this test."""
    rows = [{"id": f"q{i:03d}", "question": f"English question {i}?", "complexityType": _KINDS[i % len(_KINDS)],
             "translations": {"de": f"Deutsche Frage {i}?", "fr": f"Question française {i} ?", "ja": f"質問{i}ですか？"}}
            for i in range(n)]
    rows.append({"id": "same", "question": "x", "complexityType": "generic", "translations": {"de": "Deutsche Frage 1?"}})
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    return path


def test_one_fact_types_are_simple_two_fact_types_complex_and_yes_no_left_out(tmp_path: Path) -> None:
    messages = mintaka_data.read(_mintaka(tmp_path / "m.json"))
    by_text = {m.text: m for m in messages}
    assert by_text["Deutsche Frage 0?"].label == "simple"  # generic
    assert by_text["質問1ですか？"].label == "complex"  # multi-hop
    assert "Question française 2 ?" not in by_text  # yes/no mixes one fact and comparisons
    assert by_text["Question française 3 ?"].label == "simple" and by_text["Deutsche Frage 4?"].label == "complex"
    assert by_text["Deutsche Frage 0?"].source == "mintaka/de" and by_text["Deutsche Frage 0?"].group == "mintaka/q000"
    assert not any(m.text.startswith("English") for m in messages)  # the router already has English questions


def test_the_split_holds_out_whole_questions_in_every_language_is_seeded_and_drops_a_text_under_two_classes(
        tmp_path: Path) -> None:
    messages = mintaka_data.read(_mintaka(tmp_path / "m.json", n=200))
    train, val = mintaka_data.split(messages, seed=13)
    assert train == mintaka_data.split(messages, seed=13)[0]
    assert val and all(held_out(m.group) for m in val) and not any(held_out(m.group) for m in train)
    for group in {m.group for m in val} - {"mintaka/q001"}:  # all of a held-out question's translations are held out together
        assert len([m for m in val if m.group == group]) == 3
    assert not {m.text for m in train} & {m.text for m in val}
    texts = {m.text.lower().rstrip("?") for m in train + val}
    assert "deutsche frage 1" not in texts  # the same text as a complex and a simple question


def test_a_file_that_is_not_mintaka_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--mintaka .*not a readable JSON file.*mintaka_dev.json"):
        mintaka_data.read(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text('[{"question": "no translations"}]', encoding="utf-8")
    with pytest.raises(SystemExit, match=r"expected a list of questions with \"translations\""):
        mintaka_data.read(tmp_path / "other.json")


def test_train_router_adds_the_questions_to_the_head_and_to_the_token_reader_s_messages(tmp_path: Path) -> None:
    file = _mintaka(tmp_path / "m.json")
    trained, dumped = _tiny_corpus_run(tmp_path, "--mintaka", str(file))
    assert trained["train"]["counts"]["simple"]["mintaka/de"] > 0
    assert trained["train"]["counts"]["complex"]["mintaka/ja"] > 0
    assert len(trained["mintaka"]["texts_sha256"]) == 64 and trained["mintaka"]["complex"] == sorted(mintaka_data.COMPLEX)
    corpus_train, _ = mintaka_data.split(mintaka_data.read(file), seed=13)
    assert len(dumped) == 5 + len(corpus_train)  # five of the others replayed, the corpus's all
    assert {m.text for m in corpus_train} <= set(dumped)
