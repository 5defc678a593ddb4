"""The scorer's training pairs: labels follow the answer, unanswerable groups hold no positive, and
documentation questions point at the row they were written from."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crag_lab.learned import fit
from crag_lab.learned.data import (
    cross_doc_pairs,
    doc_pairs,
    other_article_pairs,
    perturb,
    perturbed_pairs,
    same_article_pairs,
    squad_pairs,
)
from crag_lab.learned.train import abstention_threshold

ROW = {"id": "Gate/p0/q0", "title": "Gate_Way", "question": "Which port does it use?",
       "context": "The gateway was built in 2019. It listens on port 8443. Metrics go to Prometheus.",
       "answers": ["8443"], "is_impossible": False}


def test_the_unit_holding_the_answer_is_the_only_positive_and_carries_the_title() -> None:
    pairs = squad_pairs([ROW], negatives=5)
    assert [p.text for p in pairs if p.label == 1] == ["Gate Way: It listens on port 8443."]
    assert sorted(p.text for p in pairs if p.label == 0) == [
        "Gate Way: Metrics go to Prometheus.", "Gate Way: The gateway was built in 2019."]


def test_an_answer_no_unit_holds_whole_is_skipped_not_mislabelled() -> None:
    assert squad_pairs([{**ROW, "answers": ["2019. It listens"]}]) == []


def test_an_unanswerable_row_gives_negatives_only() -> None:
    pairs = squad_pairs([{**ROW, "is_impossible": True, "answers": []}])
    assert pairs and {p.label for p in pairs} == {0}
    assert {p.source for p in pairs} == {"squad2-unanswerable"}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "port", "gateway"]), min_size=1, max_size=6),
       st.integers(0, 10_000))
def test_other_article_groups_never_use_the_questions_own_article(words: list[str], seed: int) -> None:
    rows = [{**ROW, "id": f"A/p{i}/q0", "title": "A", "question": " ".join(words) + "?"} for i in range(3)]
    rows += [{**ROW, "id": f"B/p{i}/q0", "title": "B", "context": f"The {' '.join(words)} note {i}. Another line."}
             for i in range(3)]
    pairs = other_article_pairs(rows, share=1.0, seed=seed)
    for pair in pairs:
        assert pair.label == 0
        own_title = next(r["title"] for r in rows if pair.group.startswith(r["id"]))
        assert not pair.text.startswith(f"{own_title}: ")


DOC = """# tool

## Ports

| Service | Port | Owner |
|---|---|---|
| gateway | 8443 | Payments |
| billing | 9091 | Ledger |
| search | 7070 | Discovery |

## Installation

```bash
pip install tool
```
"""


def test_a_table_question_names_its_row_subject_and_the_row_is_the_positive() -> None:
    pairs = doc_pairs("tool", DOC, seed=3)
    rows = {p.group: p for p in pairs if p.label == 1 and "Service:" in p.text}
    assert rows
    for group, positive in rows.items():
        subject = positive.text.split("Service: ")[1].split(";")[0]
        assert subject in positive.question
        negatives = [p for p in pairs if p.group == group and p.label == 0]
        assert negatives and all(subject not in p.text for p in negatives)


def test_the_install_command_answers_how_to_install() -> None:
    pairs = doc_pairs("tool", DOC, seed=1)
    install = [p for p in pairs if p.group.endswith("/install")]
    assert [p.text for p in install if p.label == 1] == ["tool > Installation: `pip install tool`"]
    assert "tool" in install[0].question


def test_cross_document_groups_are_all_negative_and_from_another_document() -> None:
    a = doc_pairs("tool", DOC, seed=1)
    b = doc_pairs("other", DOC.replace("tool", "other"), seed=1)
    for pair in cross_doc_pairs([a, b], seed=0):
        assert pair.label == 0
        assert pair.text.startswith("other") != pair.group.startswith("docs/other")


def test_the_abstention_threshold_keeps_false_abstention_within_its_share() -> None:
    answerable = [i / 100 for i in range(100)]
    threshold = abstention_threshold(answerable, [0.1, 0.2], max_false=0.15)
    assert sum(s < threshold for s in answerable) <= 15


def test_near_miss_groups_use_another_paragraph_of_the_same_article_without_the_answer() -> None:
    rows = [ROW,
            {**ROW, "id": "Gate/p1/q0", "context": "The gateway port is documented by the platform team. It rotates keys."},
            {**ROW, "id": "Gate/p2/q0", "context": "Port 8443 is also named in the appendix. Nothing else."},
            {**ROW, "id": "Other/p0/q0", "title": "Other", "context": "Which port does the gateway use? Nobody knows."}]
    pairs = same_article_pairs(rows, share=1.0, negatives=5)
    from_first = [p for p in pairs if p.group == "Gate/p0/q0/same"]
    # the own article's other paragraph sharing the question's words, not the one holding "8443",
    # never another article's paragraph, never the question's own paragraph
    assert sorted(p.text for p in from_first) == ["Gate Way: It rotates keys.",
                                                   "Gate Way: The gateway port is documented by the platform team."]
    assert {p.label for p in pairs} == {0} and {p.source for p in pairs} == {"same-article"}
    assert same_article_pairs(rows, share=0.0) == []


def test_a_pairs_file_stores_each_text_once_and_reads_back_in_order(tmp_path: Path) -> None:
    pairs = [("Which port?", "Ports: 8443.", 1), ("Which port?", "Ports: TLS.", 0), ("Who?", "Ports: 8443.", 0)]
    path = tmp_path / "pairs.json.gz"
    fit.write_pairs(path, pairs)
    questions, texts, labels = fit.read_pairs(path)
    assert list(zip(questions, texts, labels, strict=True)) == pairs
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    assert raw["texts"] == ["Ports: 8443.", "Ports: TLS."] and raw["questions"] == ["Which port?", "Who?"]


def test_fit_runs_as_a_plain_script_without_crag_lab_and_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    from crag_lab.embeddings import model_dir

    pairs = [("Which port?", "Ports: The gateway listens on 8443.", 1), ("Which port?", "Ports: It uses TLS.", 0)] * 4
    fit.write_pairs(tmp_path / "p.json.gz", pairs)
    script = Path(fit.__file__)
    # crag_lab made unimportable: the script needs torch, transformers and peft only (a GPU machine has those)
    code = ("import runpy, sys; sys.modules['crag_lab'] = None; sys.argv = ['fit.py'] + sys.argv[1:]; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    args = ["--pairs", str(tmp_path / "p.json.gz"), "--base", str(model_dir()), "--work", str(tmp_path / "w"),
            "--batch", "4", "--epochs", "1", "--warmup", "1", "--checkpoint-every", "1"]
    first = subprocess.run([sys.executable, "-c", code, *args, "--out", str(tmp_path / "a")],
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads((tmp_path / "a" / "fit.json").read_text())["steps"] == 2
    assert (tmp_path / "a" / "adapter_model.safetensors").is_file()
    again = subprocess.run([sys.executable, "-c", code, *args, "--out", str(tmp_path / "b")],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "resuming at step 2 of 2" in again.stdout
    # --init goes on from a finished adapter: the head it learned is where training starts
    import torch
    from safetensors.torch import load_file

    before = load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    on = subprocess.run([sys.executable, "-c", code, *args[:4], "--work", str(tmp_path / "w2"), "--batch", "8",
                         "--epochs", "1", "--warmup", "1", "--lr", "0", "--init", str(tmp_path / "a"),
                         "--out", str(tmp_path / "c")], capture_output=True, text=True, timeout=600)
    assert on.returncode == 0, on.stderr[-2000:]
    after = load_file(str(tmp_path / "c" / "adapter_model.safetensors"))
    head = [k for k in before if "classifier" in k]
    assert head and all(torch.equal(before[k], after[k]) for k in head)  # lr 0: unchanged from the init
    assert json.loads((tmp_path / "c" / "fit.json").read_text())["init"] == str(tmp_path / "a")


def test_a_perturbed_question_changes_what_the_unit_answers_and_never_to_something_the_paragraph_says() -> None:
    paragraph = "Mieszko was the first king of Poland in 966. He was followed by Boleslaw."
    unit = "Mieszko was the first king of Poland in 966."
    seen = {}
    for seed in range(60):
        changed = perturb("Who was the first king of Poland in 966?", unit, paragraph, ["Boleslaw", "Krakow"],
                          random.Random(seed))
        assert changed is not None
        question, kind = changed
        seen[kind] = question
    assert seen["antonym"] == "Who was the last king of Poland in 966?"
    assert seen["negation"] == "Who was not the first king of Poland in 966?"
    # another name of the article the unit does not hold; Poland is the name the unit holds
    assert seen["entity"] in {"Who was the first king of Boleslaw in 966?", "Who was the first king of Krakow in 966?"}
    number = seen["number"].split(" in ")[1].rstrip("?")
    assert number != "966" and number not in paragraph


def test_a_question_nothing_fits_is_left_alone() -> None:
    # do-support has no place for "not" a pattern can find; no antonym, name or number of the unit
    assert perturb("what did they eat", "They ate bread.", "They ate bread.", [], random.Random(0)) is None
    # a unit that already negates is not contrasted with a negated question
    assert perturb("what is used", "Nothing is used.", "Nothing is used.", [], random.Random(0)) is None


def test_perturbed_pairs_put_the_original_beside_its_changed_question_on_the_same_unit() -> None:
    rows = [{**ROW, "id": f"Gate/p0/q{i}", "question": q} for i, q in
            enumerate(["Where did the gateway get built in 2019?", "What does it use?"])]
    rows[0]["answers"] = ["2019"]
    pairs = perturbed_pairs(rows, share=1.0, seed=1)
    assert [(p.label, p.source) for p in pairs] == [(1, "perturbed"), (0, "perturbed-number")]
    kept, changed = pairs
    assert kept.text == changed.text == "Gate Way: The gateway was built in 2019."
    assert kept.question == rows[0]["question"] and changed.question != kept.question
    assert perturbed_pairs(rows, share=0.0) == []


def _squad_files(folder: Path) -> None:
    rows = [{"id": f"Article_{t}/p{p}/q0", "title": f"Article_{t}", "is_impossible": False,
             "context": f"Mieszko{t} was the first king of Land{t} in 9{p:02d}. Bolek{t} came after him.",
             "question": f"Who was the first king of Land{t} in 9{p:02d}?", "answers": [f"Mieszko{t}"]}
            for t in range(40) for p in range(5)]
    excerpt = [{**rows[0], "id": f"Ex_{t}/p0/q0", "title": f"Ex_{t}", "is_impossible": True, "answers": []}
               for t in range(2)]
    for name, data in (("squad11_train.jsonl.gz", rows), ("squad2_train_excerpt.jsonl.gz", excerpt)):
        with gzip.open(folder / name, "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in data)


def test_the_contrast_recipe_changes_questions_the_replay_did_not_draw_and_validates_on_held_out_articles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from crag_lab.learned import train

    monkeypatch.setattr(train, "documentation", lambda sites=(): [])
    _squad_files(tmp_path)
    held = train.held_out_titles(train.read_jsonl(tmp_path / "squad11_train.jsonl.gz"), 13)  # as build draws them
    assert len(held) == 2
    data = train.build(tmp_path, recipe=replace(train.RECIPES["contrast"], questions=60, perturbed=80), seed=13)
    changed = [p for p in data.train if p.source.startswith("perturbed-")]
    replayed = {p.group for p in data.train if p.source == "squad11"}
    assert len(changed) == 80  # every drawn question has a change that fits
    assert not {p.group.rsplit("/", 1)[0] for p in changed} & replayed  # other questions than the replay's
    assert all(p.text.split(": ", 1)[0].replace(" ", "_") not in held for p in changed)
    val_changed = [p for p in data.val if p.source.startswith("perturbed-")]
    assert val_changed and all(p.text.split(": ", 1)[0].replace(" ", "_") in held for p in val_changed)
    plain = train.build(tmp_path, recipe=replace(train.RECIPES["cpu"], questions=60), seed=13)
    assert not [p for p in plain.train + plain.val if p.source.startswith("perturbed")]
