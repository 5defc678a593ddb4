"""The ChatterBot corpus as router messages (crag_lab/learned/chatterbot_data.py) and ``train_router --chatterbot``."""

from __future__ import annotations

from pathlib import Path

import pytest

from crag_lab.learned import chatterbot_data
from crag_lab.learned.router_data import held_out
from tests.test_learned_router import _tiny_corpus_run


def _corpus(folder: Path) -> Path:
    """A corpus laid out as the package's data folder; written for this test."""
    files = {
        "german/greetings.yml": "categories:\n- greetings\nconversations:\n"
                                + "".join(f"- - Guten Morgen {i}!\n  - Hallo {i}, wie geht's?\n" for i in range(12)),
        "german/history.yml": "categories:\n- history\nconversations:\n"
                              + "".join(f"- - Wann wurde Burg {i} gebaut?\n  - Im Jahr 1{i}00.\n" for i in range(12)),
        "german/ai.yml": "categories:\n- ai\nconversations:\n- - Bist du ein Roboter?\n  - Ja.\n",
        "spanish/emociones.yml": "categories:\n- emociones\nconversations:\n- - " + "muy " * 60 + "largo\n  - ¡Hola!\n",
    }
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_small_talk_topics_give_every_turn_question_topics_their_opening_and_mixed_topics_nothing(tmp_path: Path) -> None:
    messages = chatterbot_data.read(_corpus(tmp_path / "data"))
    by_text = {m.text: m for m in messages}
    assert by_text["Guten Morgen 3!"].label == by_text["Hallo 3, wie geht's?"].label == "chitchat"
    assert by_text["Wann wurde Burg 3 gebaut?"].label == "simple" and "Im Jahr 1300." not in by_text  # the answer is no message
    assert "Bist du ein Roboter?" not in by_text  # a topic that mixes small talk and questions is left out
    assert "¡Hola!" in by_text and not any(m.text.startswith("muy") for m in messages)  # monologues are left out
    assert by_text["Guten Morgen 3!"].source == "chatterbot/german"
    assert by_text["Guten Morgen 3!"].group == by_text["Hallo 3, wie geht's?"].group == "chatterbot/german/greetings/3"


def test_the_split_holds_out_whole_dialogues_repeats_questions_and_is_seeded(tmp_path: Path) -> None:
    messages = chatterbot_data.read(_corpus(tmp_path / "data"))
    train, val = chatterbot_data.split(messages, seed=13)
    assert train == chatterbot_data.split(messages, seed=13)[0]
    assert val and all(held_out(m.group) for m in val) and not any(held_out(m.group) for m in train)
    assert not {m.text for m in train} & {m.text for m in val}
    questions = [m for m in train if m.label == "simple"]
    groups = {m.group for m in questions}
    assert len(questions) > len(groups)  # each training question seen more than once, each time typed differently
    assert len({m.text for m in questions}) == len(questions)


def test_a_text_under_two_classes_is_left_out(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    for topic in ("greetings", "trivia"):
        (folder / "dutch").mkdir(parents=True, exist_ok=True)
        (folder / "dutch" / f"{topic}.yml").write_text(f"categories:\n- {topic}\nconversations:\n- - Wat is dit?\n  - Ja\n",
                                                       encoding="utf-8")
    train, val = chatterbot_data.split(chatterbot_data.read(folder), seed=13)
    texts = [m.text.lower() for m in train + val]
    assert "ja" in texts and not any(text.startswith("wat is dit") for text in texts)


def test_a_folder_without_the_corpus_or_a_broken_file_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--chatterbot .*no <language>/<topic>\.yml files here; give the data folder"):
        chatterbot_data.read(tmp_path)
    (tmp_path / "french").mkdir()
    (tmp_path / "french" / "greetings.yml").write_text("conversations: [- - oops\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"greetings\.yml: not a ChatterBot corpus file"):
        chatterbot_data.read(tmp_path)


def test_train_router_adds_the_corpus_to_the_head_and_to_the_token_reader_s_messages(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "data")
    trained, dumped = _tiny_corpus_run(tmp_path, "--chatterbot", str(corpus))
    assert trained["train"]["counts"]["chitchat"]["chatterbot/german"] > 0
    assert trained["train"]["counts"]["simple"]["chatterbot/german"] > 0
    assert len(trained["chatterbot"]["texts_sha256"]) == 64
    corpus_train, _ = chatterbot_data.split(chatterbot_data.read(corpus), seed=13)
    assert len(dumped) == 5 + len(corpus_train)  # five of the others replayed, the corpus's all
    assert {m.text for m in corpus_train} <= set(dumped)


def test_fit_router_continues_from_a_reader_s_adapter_and_head(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    from crag_lab.embeddings import model_dir
    from crag_lab.learned.fit_router import fit
    from crag_lab.learned.router_data import CLASSES

    train = [("hi!", 0), ("Who founded X?", 1), ("Who founded X, and when was Y built?", 2)] * 2
    fit(train, CLASSES, base=model_dir(), out=tmp_path / "first", work=tmp_path / "w1", batch=3, epochs=1.0, warmup=1,
        lr=5e-3)
    # lr 0: nothing moves, so what comes out is where training started
    kept = fit(train, CLASSES, base=model_dir(), out=tmp_path / "kept", work=tmp_path / "w2", batch=3, epochs=1.0,
               warmup=1, lr=0.0, init=tmp_path / "first")
    fresh = fit(train, CLASSES, base=model_dir(), out=tmp_path / "fresh", work=tmp_path / "w3", batch=3, epochs=1.0,
                warmup=1, lr=0.0)
    weights = {name: load_file(str(tmp_path / name / "adapter_model.safetensors")) for name in ("first", "kept", "fresh")}
    head = next(k for k in weights["first"] if "classifier" in k and k.endswith("weight"))
    assert kept["init"] == str(tmp_path / "first") and fresh["init"] is None
    assert (weights["kept"][head] == weights["first"][head]).all()
    assert not (weights["fresh"][head] == weights["first"][head]).all()
