"""Training pairs for the answer scorer from questions people wrote about tables (WikiTableQuestions).

The knowledge base's answers sit mostly in table rows, and the scorer's other documentation pairs
are templated ("What is the port of gateway?"). WikiTableQuestions (Pasupat and Liang, 2015; CC BY-SA
4.0; https://github.com/ppasupat/WikiTableQuestions) has 14,152 training questions that crowd workers
wrote about 1,679 Wikipedia tables, in their own words ("which team won previous to crettyard?").

Each table is written as the markdown a knowledge-base page would hold (its page title as heading)
and cut by the runtime (`crag_lab.offline.units.units_of`: a row is ``Header: cell; …``), keyed as the
offline model keys units (``"Title: unit"``). A question is kept when it is a *lookup*: its answer
is a whole cell of one or two rows, and the question neither computes over rows (a count, a sum, a
comparison) nor asks about a row's neighbour (then the row holding the answer does not answer it).
Those rows are positives, other rows of the same table hard negatives; for a share of the questions,
rows of another table give an unanswerable group.

Only ``data/training.tsv`` is read, never ``pristine-unseen-tables`` (the dataset's test split).

>>> rows = [["Year", "League"], ["2003", "USL A-League"], ["2004", "USL First Division"]]
>>> [u for u in table_units("Portland Timbers", rows)]
['Portland Timbers: Year: 2003; League: USL A-League', 'Portland Timbers: Year: 2004; League: USL First Division']
>>> lookup_rows(["2004"], rows[1:]), lookup_rows(["4"], rows[1:])
([1], [])
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from crag_lab.learned.data import _ROW_TEMPLATES, Pair, _norm, unit_text
from crag_lab.offline.units import units_of

__all__ = ["WTQ_SOURCE", "WtqQuestion", "held_out_table", "lookup_rows", "read_questions", "read_table",
           "table_units", "wtq_pairs"]

WTQ_SOURCE = "wtq"
MAX_ROWS = 200
"""Longer tables are skipped."""
_AGGREGATE = re.compile(
    r"\b(how many|how much|number of|total|sum|difference|average|combined|count|than|"
    r"before|after|previous|preceding|next|following|above|below|between)\b", re.IGNORECASE)
"""Questions that compute over rows (a count, a sum, a comparison) or name one row to ask about its
neighbour: the row holding the answer does not answer them on its own, so they are not kept."""


@dataclass(frozen=True)
class WtqQuestion:
    """One training question: its id, the text, the table file (``csv/204-csv/590.csv``) and its answers."""

    id: str
    question: str
    table: str
    answers: tuple[str, ...]


def read_questions(folder: str | Path) -> list[WtqQuestion]:
    """The training questions (``data/training.tsv``; answers are ``|``-separated, escaped as the dataset's README says)."""
    out = []
    lines = (Path(folder) / "data" / "training.tsv").read_text(encoding="utf-8").splitlines()
    for line in lines[1:]:
        qid, question, table, target = line.split("\t")
        answers = tuple(a.replace("\\p", "|").replace("\\n", " ").replace("\\\\", "\\") for a in target.split("|"))
        out.append(WtqQuestion(qid, question, table, answers))
    return out


def read_table(folder: str | Path, table: str) -> tuple[str, list[list[str]]]:
    """A table's page title (``page/…json``) and its rows, header first (``csv/…csv``: ``\\"`` and ``\\\\`` escaped)."""
    path = Path(folder) / table
    page = Path(folder) / "page" / path.parent.name.replace("-csv", "-page") / (path.stem + ".json")
    title = str(json.loads(page.read_text(encoding="utf-8")).get("title", "")) if page.exists() else ""
    with path.open(encoding="utf-8", newline="") as fh:
        rows = [[" ".join(c.split()) for c in row] for row in csv.reader(fh, escapechar="\\", doublequote=False)]
    return title, [r for r in rows if any(r)]


def _markdown(title: str, rows: Sequence[Sequence[str]]) -> str:
    def cells(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "/") or "-" for c in row) + " |"

    header, *body = rows
    return "\n".join([f"# {title}", "", cells(header), "|" + "---|" * len(header), *(cells(r) for r in body)])


def table_units(title: str, rows: Sequence[Sequence[str]]) -> list[str]:
    """The table's rows as the offline model reads them: one unit a row, ``"Title: Header: cell; …"``.
    A row the runtime cuts differently (an empty one) gives no unit, so callers index by `units_of`'s output."""
    return [unit_text(title, u) for u in units_of(1, _markdown(title, rows), title) if "; " in u.text]


def lookup_rows(answers: Sequence[str], body: Sequence[Sequence[str]]) -> list[int]:
    """The rows of ``body`` with a cell equal to one of ``answers`` (case and spacing aside), when one or
    two rows hold all of them; else none (the answer is computed, or too many rows hold it)."""
    wanted = {_norm(a) for a in answers if a.strip()}
    hits = [i for i, row in enumerate(body) if wanted & {_norm(c) for c in row}]
    found = {_norm(c) for i in hits for c in body[i]} & wanted
    return hits if 1 <= len(hits) <= 2 and found == wanted else []


def held_out_table(table: str) -> bool:
    """About one table in five, by a hash of its file name: validation only, never trained on."""
    return int(hashlib.sha256(table.encode()).hexdigest(), 16) % 5 == 0


def _groups(folder: Path, questions: Sequence[WtqQuestion]) -> Iterator[tuple[WtqQuestion, list[str], list[int]]]:
    tables: dict[str, tuple[list[str], list[list[str]]]] = {}
    for q in questions:
        if _AGGREGATE.search(q.question):
            continue
        if q.table not in tables:
            title, rows = read_table(folder, q.table)
            units = table_units(title, rows) if 3 <= len(rows) <= MAX_ROWS + 1 else []
            tables[q.table] = (units, rows[1:] if len(units) == len(rows) - 1 else [])
        units, body = tables[q.table]
        hits = lookup_rows(q.answers, body) if body else []
        if hits:
            yield q, units, hits


def wtq_pairs(folder: str | Path, *, held_out: bool = False, limit: int = 0, other_share: float = 0.25,
              negatives: int = 3, seed: int = 0) -> list[Pair]:
    """Pairs from the WikiTableQuestions training questions of the tables `held_out_table` keeps out
    (``held_out``) or in (the default), at most ``limit`` questions (0: all), drawn by ``seed``.

    Per kept question: its answer rows (label 1) and up to ``negatives`` other rows of its table (0);
    for ``other_share`` of them also up to 4 rows of another kept table, an unanswerable group.
    """
    folder = Path(folder)
    rng = random.Random(seed)
    questions = [q for q in read_questions(folder) if held_out_table(q.table) == held_out]
    rng.shuffle(questions)
    kept = list(_groups(folder, questions))
    kept = kept[:limit] if limit else kept
    out: list[Pair] = []
    for q, units, hits in kept:
        gid = f"{WTQ_SOURCE}/{q.id}"
        others = [u for i, u in enumerate(units) if i not in hits]
        out += [Pair(q.question, units[i], 1, gid, WTQ_SOURCE) for i in hits]
        out += [Pair(q.question, u, 0, gid, WTQ_SOURCE) for u in rng.sample(others, min(len(others), negatives))]
        if rng.random() < other_share:
            q2, units2, _ = kept[rng.randrange(len(kept))]
            if q2.table != q.table:
                out += [Pair(q.question, u, 0, f"{gid}/other", f"{WTQ_SOURCE}-unanswerable")
                        for u in rng.sample(units2, min(len(units2), 4))]
    return out


ROWS_SOURCE = "wtq-rows"
_LETTER = re.compile(r"[^\W\d_]")


def subject_column(body: Sequence[Sequence[str]]) -> int | None:
    """The leftmost column that names its rows: every cell distinct, at most 60 characters, and nearly
    every one (90 %) holding a letter, so that a number column (a rank, a year) is never the subject."""
    for col in range(min(len(r) for r in body)):
        cells = [r[col] for r in body]
        if (len({_norm(c) for c in cells}) == len(cells) and all(0 < len(c) <= 60 for c in cells)
                and sum(bool(_LETTER.search(c)) for c in cells) >= 0.9 * len(cells)):
            return col
    return None


def row_pairs(folder: str | Path, *, held_out: bool = False, per_table: int = 3, other_share: float = 0.25,
              negatives: int = 3, seed: int = 0) -> list[Pair]:
    """Templated lookups over the tables of WikiTableQuestions' training questions: a row named by its
    subject (`subject_column`), one other column asked ("What is the league of 2004 Portland
    Timbers?" with `data`'s row templates), as a knowledge base of tables is asked.

    Per table kept (`held_out_table` says which), up to ``per_table`` rows drawn by ``seed``: that row
    (label 1) and up to ``negatives`` other rows of the table (0); for ``other_share`` of the questions
    also up to 4 rows of another kept table, an unanswerable group.
    """
    folder = Path(folder)
    rng = random.Random(seed)
    names = sorted({q.table for q in read_questions(folder) if held_out_table(q.table) == held_out})
    tables: list[tuple[str, list[str], list[list[str]], list[str], int]] = []
    for name in names:
        title, rows = read_table(folder, name)
        if not 3 <= len(rows) <= MAX_ROWS + 1 or len({len(r) for r in rows}) != 1 or len(rows[0]) < 2:
            continue
        units = table_units(title, rows)
        col = subject_column(rows[1:])
        if col is not None and len(units) == len(rows) - 1:
            tables.append((name, units, rows[1:], rows[0], col))
    out: list[Pair] = []
    for t, (name, units, body, header, col) in enumerate(tables):
        asked = [c for c in range(len(header)) if c != col and header[c] and len(header[c]) <= 40]
        for i in sorted(rng.sample(range(len(body)), min(per_table, len(body)))):
            answers = [c for c in asked if body[i][c] and body[i][c] != "-"]
            if not answers:
                continue
            question = rng.choice(_ROW_TEMPLATES).format(col=header[rng.choice(answers)].lower(), subject=body[i][col])
            gid = f"{ROWS_SOURCE}/{name}/{i}"
            others = [u for j, u in enumerate(units) if j != i]
            out.append(Pair(question, units[i], 1, gid, ROWS_SOURCE))
            out += [Pair(question, u, 0, gid, ROWS_SOURCE) for u in rng.sample(others, min(len(others), negatives))]
            if len(tables) > 1 and rng.random() < other_share:
                other = tables[(t + 1 + rng.randrange(len(tables) - 1)) % len(tables)][1]
                out += [Pair(question, u, 0, f"{gid}/other", f"{ROWS_SOURCE}-unanswerable")
                        for u in rng.sample(other, min(len(other), 4))]
    return out
