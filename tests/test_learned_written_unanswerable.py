"""Written unanswerable questions come back with their own paragraph, from a checkout or its git directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from crag_lab.learned.written_unanswerable import contrast_examples, read_pairs, rejoin

SQUAD = [
    {"title": "Greek_economy", "question": "What was Greece's unemployment rate in 2009?",
     "context": "In 2009 Greece had an unemployment rate of 9.4 %.", "answers": ["9.4 %"], "answer_starts": [43]},
    {"title": "Beer", "question": "What is beer brewed from?", "context": "Beer is brewed from cereal grains.",
     "answers": ["cereal grains"], "answer_starts": [20]},
    {"title": "Beer", "question": "What is beer brewed from?", "context": "Ale is a beer brewed warm.",
     "answers": ["warm"], "answer_starts": [21]},
]


def write_qg(folder: Path) -> Path:
    qg = folder / "QG"
    qg.mkdir(parents=True)
    (qg / "train-answerable-questions.txt").write_text(
        "a1\twhat was greece 's unemployment rate in 2009 ?\t7\t8\n"
        "a2\twhat is beer brewed from ?\t4\t5\n"
        "a3\twho founded rome ?\t1\t2\n", encoding="utf-8")
    (qg / "train-unanswerable-questions.txt").write_text(
        "u1\twhat was greece 's employment rate in 2009 ?\t7\t8\n"
        "u2\twhat is wine brewed from ?\t4\t5\n"
        "u3\twho founded paris ?\t1\t2\n", encoding="utf-8")
    (qg / "dev-answerable-questions.txt").write_text("", encoding="utf-8")
    (qg / "dev-unanswerable-questions.txt").write_text("", encoding="utf-8")
    (qg / "test-answerable-questions.txt").write_text("t1\twho were the normans ?\t1\t2\n", encoding="utf-8")
    (qg / "test-unanswerable-questions.txt").write_text("t2\twho were the vikings ?\t1\t2\n", encoding="utf-8")
    return folder


def test_a_pair_gets_its_paragraph_from_squad_and_ambiguous_or_unknown_ones_are_left_out(tmp_path: Path) -> None:
    pairs = read_pairs(write_qg(tmp_path / "unansq"), SQUAD)
    # "what is beer brewed from" names two paragraphs and "who founded rome" none: both are left out,
    # and the test split (SQuAD 2.0 dev) is never read
    assert [p["id"] for p in pairs] == ["u1"]
    pair = pairs[0]
    assert pair["question"] == "what was greece's employment rate in 2009?"
    assert pair["context"] == SQUAD[0]["context"] and pair["title"] == "Greek_economy"


def test_each_pair_reads_one_passage_both_ways(tmp_path: Path) -> None:
    examples = contrast_examples(read_pairs(write_qg(tmp_path / "unansq"), SQUAD))
    assert [(e.start, e.source) for e in examples] == [(-1, "written-unanswerable"), (len("Greek economy: ") + 43, "squad11")]
    assert examples[0].passage == examples[1].passage
    assert examples[1].passage[examples[1].start:].startswith("9.4 %")


def test_the_files_are_read_from_a_git_directory_too(tmp_path: Path) -> None:
    work = write_qg(tmp_path / "work")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "QG"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "qg"], check=True)
    assert [p["id"] for p in read_pairs(work / ".git", SQUAD)] == ["u1"]


def test_a_folder_without_the_files_names_itself_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="give an UnAnsQ checkout or its git directory"):
        read_pairs(tmp_path, SQUAD)


def test_rejoin_takes_out_the_spaces_of_tokenisation_only() -> None:
    assert rejoin("which is n't it ?") == "which isn't it?"
    assert rejoin("what did u.s . forces do ?") == "what did u.s. forces do?"


def test_the_continuation_examples_draw_pairs_and_first_recipe_examples_the_same_way_each_time(tmp_path: Path) -> None:
    import gzip
    import json

    from crag_lab.learned.span_data import read_examples
    from crag_lab.learned.train_spans import dump_written

    train_dir = tmp_path / "train"
    train_dir.mkdir()
    rows = [{**row, "id": f"q{k}"} for k, row in enumerate(SQUAD[:2])]
    with gzip.open(train_dir / "squad11_train.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    source = write_qg(tmp_path / "unansq")
    counts = dump_written(train_dir, source, tmp_path / "a", pairs=1, replay=1)
    # one pair read both ways, one example of the first recipe; no article is held out of two
    assert counts["train"]["written-unanswerable"] == 1 and sum(counts["train"].values()) == 3
    assert counts["validation"] == {}
    dump_written(train_dir, source, tmp_path / "b", pairs=1, replay=1)
    assert (tmp_path / "a" / "train.json.gz").read_bytes() == (tmp_path / "b" / "train.json.gz").read_bytes()
    assert any(e.start == -1 and e.source == "written-unanswerable" for e in read_examples(tmp_path / "a" / "train.json.gz"))


def test_the_scorer_reads_every_unit_of_a_written_unanswerable_paragraph_as_no_answer(tmp_path: Path) -> None:
    from crag_lab.learned.written_unanswerable import scorer_pairs

    pairs = scorer_pairs(read_pairs(write_qg(tmp_path / "unansq"), SQUAD))
    assert pairs and {(p.label, p.source, p.group) for p in pairs} == {(0, "written-unanswerable", "u1")}
    assert all(p.question == "what was greece's employment rate in 2009?" for p in pairs)


def test_the_written_scorer_recipe_without_its_data_says_where_to_get_it(tmp_path: Path) -> None:
    from crag_lab.learned.train import RECIPES, build

    with pytest.raises(SystemExit, match="pass --written with a clone"):
        build(tmp_path, recipe=RECIPES["written"], seed=13)
