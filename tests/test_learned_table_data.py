"""The scorer's table pairs (WikiTableQuestions): a lookup question's answer row is the positive, a
question that computes over rows is not kept, held-out tables never reach training, and the tables
recipe says what it needs before it reads anything."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from crag_lab.learned import train
from crag_lab.learned.table_data import (
    held_out_table,
    lookup_rows,
    read_questions,
    read_table,
    row_pairs,
    subject_column,
    table_units,
    wtq_pairs,
)

HEADER = ["Year", "Team", "League", "Coach"]
BODY = [["2001", "Portland Timbers", "USL A-League", "Bo Mayer"],
        ["2002", "Seattle Sounders", "USL A-League", "Brian Schmetzer"],
        ["2003", "Vancouver Whitecaps", "USL First Division", "Bob Lilley"],
        ["2004", "Montreal Impact", "USL First Division", "Nick De Santis"]]


def _wtq(folder: Path, tables: int = 12) -> Path:
    """A WikiTableQuestions-shaped folder: ``tables`` tables, three questions each (a lookup, a count, a neighbour)."""
    (folder / "data").mkdir(parents=True)
    lines = ["id\tutterance\tcontext\ttargetValue"]
    for t in range(tables):
        csv_dir, page_dir = folder / "csv" / "204-csv", folder / "page" / "204-page"
        csv_dir.mkdir(parents=True, exist_ok=True)
        page_dir.mkdir(parents=True, exist_ok=True)
        rows = [HEADER, *[[y, f"{team} {t}", league, coach] for y, team, league, coach in BODY]]
        (csv_dir / f"{t}.csv").write_text("\n".join(",".join(f'"{c}"' for c in r) for r in rows) + "\n", encoding="utf-8")
        (page_dir / f"{t}.json").write_text(json.dumps({"title": f"Soccer season {t}"}), encoding="utf-8")
        table = f"csv/204-csv/{t}.csv"
        lines += [f"nt-{t}a\twho coached the whitecaps {t}?\t{table}\tBob Lilley",
                  f"nt-{t}b\thow many teams played in the usl a-league?\t{table}\t2",
                  f"nt-{t}c\twhich team came after the sounders?\t{table}\tVancouver Whitecaps {t}"]
    (folder / "data" / "training.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_a_table_row_reads_as_the_runtime_cuts_it_keyed_by_the_page_title() -> None:
    units = table_units("Soccer", [HEADER, *BODY])
    assert units[2] == "Soccer: Year: 2003; Team: Vancouver Whitecaps; League: USL First Division; Coach: Bob Lilley"
    assert len(units) == len(BODY)


def test_an_answer_is_a_lookup_only_when_one_or_two_rows_hold_all_of_it() -> None:
    assert lookup_rows(["bob lilley"], BODY) == [2]  # case aside
    assert lookup_rows(["USL A-League"], BODY) == [0, 1]
    assert lookup_rows(["USL First Division", "USL A-League"], BODY) == []  # four rows
    assert lookup_rows(["Bob Lilley", "Pelé"], BODY) == []  # part of the answer is in no row
    assert lookup_rows(["200"], BODY) == []  # a number inside a cell is not the cell


def test_escaped_quotes_and_backslashes_in_a_table_read_back(tmp_path: Path) -> None:
    path = tmp_path / "csv" / "200-csv" / "1.csv"
    path.parent.mkdir(parents=True)
    path.write_text('"Name","Note"\n"A \\"quoted\\" one","back\\\\slash"\n', encoding="utf-8")
    title, rows = read_table(tmp_path, "csv/200-csv/1.csv")
    assert title == "" and rows == [["Name", "Note"], ['A "quoted" one', "back\\slash"]]


def test_lookup_questions_give_their_row_as_the_positive_and_other_rows_as_negatives(tmp_path: Path) -> None:
    folder = _wtq(tmp_path)
    assert len(read_questions(folder)) == 36
    pairs = wtq_pairs(folder, other_share=0.0) + wtq_pairs(folder, held_out=True, other_share=0.0)
    questions = {p.question for p in pairs}
    assert questions and all(q.startswith("who coached") for q in questions)  # the count and the neighbour are not kept
    for question in questions:
        group = [p for p in pairs if p.question == question]
        t = question.split()[-1].rstrip("?")
        assert [p.text for p in group if p.label] == [table_units(f"Soccer season {t}", [HEADER, *[
            [y, f"{team} {t}", league, coach] for y, team, league, coach in BODY]])[2]]
        assert len(group) == 4 and {p.source for p in group} == {"wtq"}


def test_held_out_tables_never_reach_training_and_other_table_groups_are_all_negative(tmp_path: Path) -> None:
    folder = _wtq(tmp_path, tables=30)
    trained, held = wtq_pairs(folder, other_share=1.0, seed=3), wtq_pairs(folder, held_out=True, other_share=1.0, seed=3)
    def tables(pairs: list) -> set[str]:
        return {p.text.split(":", 1)[0] for p in pairs if p.source == "wtq"}
    assert tables(trained) and tables(held) and not tables(trained) & tables(held)
    assert {held_out_table(f"csv/204-csv/{t.split()[-1]}.csv") for t in tables(held)} == {True}
    others = [p for p in trained if p.source == "wtq-unanswerable"]
    assert others and not any(p.label for p in others)
    for p in others:  # another table's rows: the question names its own table's number
        assert p.text.split(":", 1)[0].split()[-1] != p.question.split()[-1].rstrip("?")
    assert wtq_pairs(folder, other_share=1.0, seed=3) == trained  # seeded
    assert len({p.question for p in wtq_pairs(folder, limit=2)}) == 2


@pytest.mark.parametrize("recipe", ["tables", "rows"])
def test_the_table_recipes_name_the_missing_dataset_before_reading_anything(tmp_path: Path, recipe: str) -> None:
    with pytest.raises(SystemExit, match=r"--wtq with a clone of https://github\.com/ppasupat/WikiTableQuestions"):
        train.build(tmp_path / "nowhere", recipe=train.RECIPES[recipe], seed=13)


def test_a_row_is_named_by_the_leftmost_column_of_distinct_names_never_by_a_number_column() -> None:
    assert subject_column(BODY) == 1  # the years are distinct but numbers; the teams name the rows
    assert subject_column([[r[0], r[2]] for r in BODY]) is None  # leagues repeat
    assert subject_column([["1", "x"], ["2", "x"]]) is None


def test_templated_row_lookups_name_the_positive_rows_subject_and_ask_another_of_its_columns(tmp_path: Path) -> None:
    folder = _wtq(tmp_path, tables=30)
    trained, held = row_pairs(folder, other_share=1.0, seed=3), row_pairs(folder, held_out=True, other_share=1.0, seed=3)
    assert trained and held and row_pairs(folder, other_share=1.0, seed=3) == trained  # seeded
    for pairs in (trained, held):
        for gid in {p.group for p in pairs if p.source == "wtq-rows"}:
            group = [p for p in pairs if p.group == gid]
            positives = [p for p in group if p.label]
            assert len(positives) == 1 and 2 <= len(group) <= 4
            named = [u for u in (p.text for p in group) if u.split("Team: ", 1)[1].split(";")[0] in positives[0].question]
            assert named == [positives[0].text]  # only the positive names the asked subject
    def tables(pairs: list) -> set[str]:
        return {p.text.split(":", 1)[0] for p in pairs if p.source == "wtq-rows"}
    assert not tables(trained) & tables(held)
    others = [p for p in trained if p.source == "wtq-rows-unanswerable"]
    assert others and not any(p.label for p in others)
    assert all(p.text.split(":", 1)[0] != q.text.split(":", 1)[0]
               for p in others for q in trained if q.group + "/other" == p.group and q.label)


@pytest.mark.parametrize(("recipe", "source"), [("tables", "wtq"), ("rows", "wtq-rows")])
def test_the_table_recipes_add_table_pairs_beside_the_replay_and_validate_on_held_out_tables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recipe: str, source: str) -> None:
    monkeypatch.setattr(train, "documentation", lambda sites=(): [])
    rows = [{"id": f"Land{t}/p{p}/q0", "title": f"Land{t}", "is_impossible": False,
             "context": f"Land{t} was ruled by Mieszko{t} in 9{p:02d}. It had rivers.",
             "question": f"Who ruled Land{t} in 9{p:02d}?", "answers": [f"Mieszko{t}"]} for t in range(40) for p in range(3)]
    excerpt = [{**rows[0], "id": f"Ex_{t}/p0/q0", "title": f"Ex_{t}", "is_impossible": True, "answers": []} for t in range(2)]
    for name, data in (("squad11_train.jsonl.gz", rows), ("squad2_train_excerpt.jsonl.gz", excerpt)):
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in data)
    folder = _wtq(tmp_path / "wtq", tables=30)
    data = train.build(tmp_path, recipe=replace(train.RECIPES[recipe], questions=30), seed=13, wtq=folder)
    assert {p.source for p in data.train} >= {source, "squad11"}
    assert not {p.source for p in data.train + data.val} & ({"wtq", "wtq-rows"} - {source})
    trained = {p.text.split(":", 1)[0] for p in data.train if p.source == source}
    validated = {p.text.split(":", 1)[0] for p in data.val if p.source == source}
    assert trained and validated and not trained & validated
    plain = train.build(tmp_path, recipe=replace(train.RECIPES["cpu"], questions=30), seed=13, wtq=folder)
    assert not [p for p in plain.train + plain.val if p.source.startswith("wtq")]
