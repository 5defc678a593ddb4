"""Labelled query sets: the project's ``kb_queries.jsonl`` and BEIR-style passage folders.

A BEIR-style folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``) is a passage corpus, not a
knowledge base. `EvalSet.write_kb` turns it into one, explicitly: one Markdown file per passage
(``# Title`` then the text, one sentence per line), named by a slug of the passage id, so the gold
location of a passage is simply its file path. With ``limit`` only a sample of queries is kept and
the corpus shrinks to the passages those queries need (their gold passages plus their listed
distractors: HotpotQA's ``context_doc_ids``, SQuAD 2.0's ``paired_doc_id``).

Every row is validated against a schema (`KbQueryRow`, `BeirQueryRow`, `CorpusRow`) with strict
types before it is read: ``"answerable": "false"``, a string where a list of answers or gold
locations belongs, or a number where text belongs is a `crag_lab.errors.DatasetFileError` naming
the file, the line and the field, never a label read as something else. Keys the schema does not
name are ignored. Questions, answers and passages are made Unicode NFC (`crag_lab._text.nfc`).

>>> ds = load_dataset("data/kb_queries.jsonl")  # doctest: +SKIP
>>> ds.queries[1].gold  # doctest: +SKIP
(GoldRef(path='services/api-gateway/README.md', start=11, end=13),)
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crag_lab._text import check_question, nfc
from crag_lab.errors import DatasetFileError
from crag_lab.eval.metrics import COMPLEXITIES, GoldRef

DEFAULT_CACHE_DIR = Path(".cache/eval_kb")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_DISTRACTOR_KEYS = ("context_doc_ids", "gold_doc_ids", "paired_doc_id", "doc_ids")


@dataclass(frozen=True)
class EvalQuery:
    """One labelled question. Labels the dataset does not give are None (or empty)."""

    id: str
    question: str
    answers: tuple[str, ...] = ()
    answerable: bool | None = None
    complexity: str | None = None
    gold: tuple[GoldRef, ...] = ()
    needs: tuple[str, ...] = ()  # passage ids this query needs in a restricted corpus
    kind: str | None = None  # a multi-hop question's kind: "bridge" or "comparison" (`hotpot_kind`)

    def row(self) -> dict[str, Any]:
        """The dict `Lab.run` takes: ``id``, ``question`` and the labels (kept in each record)."""
        return {"id": self.id, "question": self.question, "answers": list(self.answers),
                "answerable": self.answerable, "complexity": self.complexity,
                "gold": [str(g) for g in self.gold]}


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


@dataclass
class EvalSet:
    """A named query set, and either the knowledge base it is asked against or the passages to build one.

    ``kb`` is set for the project's query file (``data/kb``) and after `write_kb`.
    """

    name: str
    queries: list[EvalQuery]
    source: Path
    passages: list[Passage] = field(default_factory=list)
    kb: Path | None = None
    limit: int | None = None
    seed: int = 0

    def __len__(self) -> int:
        return len(self.queries)

    def __iter__(self) -> Iterator[EvalQuery]:
        return iter(self.queries)

    def rows(self) -> list[dict[str, Any]]:
        return [q.row() for q in self.queries]

    @property
    def has_complexity(self) -> bool:
        return any(q.complexity is not None for q in self.queries)

    @property
    def has_kinds(self) -> bool:
        return any(q.kind is not None for q in self.queries)

    def kb_name(self) -> str:
        """The cache folder name: the dataset name plus a hash of the passage set when restricted."""
        if self.limit is None:
            return f"{self.name}-full"
        digest = hashlib.sha1("\n".join(sorted(p.id for p in self.passages)).encode()).hexdigest()[:10]
        return f"{self.name}-n{len(self.queries)}-{digest}"

    def write_kb(self, cache_dir: str | Path = DEFAULT_CACHE_DIR) -> Path:
        """Write the passages as a knowledge-base folder (unchanged files are left alone) and return it.

        ``Lab.from_directory`` on the returned folder indexes it once and reuses the index after.
        """
        if not self.passages:
            if self.kb is None:
                raise ValueError(f"{self.source} has no passages to write and no knowledge base folder")
            return self.kb
        root = Path(cache_dir) / self.kb_name()
        root.mkdir(parents=True, exist_ok=True)
        wanted = {}
        for passage in self.passages:
            wanted[passage_filename(passage.id)] = passage_markdown(passage)
        for stale in root.glob("*.md"):
            if stale.name not in wanted:
                stale.unlink()
        for name, text in wanted.items():
            target = root / name
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                target.write_text(text, encoding="utf-8")
        self.kb = root
        return root


def passage_filename(doc_id: str) -> str:
    """A file name for a passage id: a readable slug plus a short hash when the slug changed it.

    >>> passage_filename("hp00001"), passage_filename("Doc 7/b")
    ('hp00001.md', 'doc-7-b-c6d5d2.md')
    """
    slug = re.sub(r"[^a-z0-9._-]+", "-", doc_id.lower()).strip("-.") or "passage"
    if slug != doc_id:
        slug += "-" + hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:6]
    return slug + ".md"


def passage_markdown(passage: Passage) -> str:
    """``# Title`` (when there is one), a blank line, then the text with one sentence per line.

    One sentence per line lets the knowledge base cut long passages between sentences.

    >>> print(passage_markdown(Passage("p1", "Paris", "Paris is a city.  It is in France.")), end="")
    # Paris
    <BLANKLINE>
    Paris is a city.
    It is in France.
    """
    lines = [s.strip() for s in _SENTENCE.split(" ".join(passage.text.split())) if s.strip()]
    head = f"# {' '.join(passage.title.split())}\n\n" if passage.title.strip() else ""
    return head + "\n".join(lines) + "\n"


# ---- the row schemas ---------------------------------------------------------------------------------

_TEXT = "a JSON string"
_TEXTS = 'a JSON list of strings, e.g. ["8443"]'
_ID = "a JSON string or integer"
_IDS = 'a JSON list of passage ids, e.g. ["d1", "d2"] (or one id)'


class _Row(BaseModel):
    """Strict types (a string is never a list, ``"false"`` never a boolean); unknown keys are ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, populate_by_name=True)

    question: str | None = Field(None, description=_TEXT)
    query: str | None = Field(None, description=_TEXT)
    text: str | None = Field(None, description=_TEXT)
    complexity: str | None = Field(None, description=f"one of {list(COMPLEXITIES)} as a JSON string")
    answerable: bool | None = Field(None, description="true or false (a JSON boolean, without quotes)")

    def question_text(self, where: str) -> str:
        """The question (``question``, else ``query``, else ``text``), checked and made NFC."""
        question = next((q for q in (self.question, self.query, self.text) if q is not None), None)
        if question is None or not question.strip():
            raise DatasetFileError(f"{where}: no 'question' text")
        return check_question(question, what=f"{where}: question")

    def complexity_label(self, where: str) -> str | None:
        if self.complexity is not None and self.complexity not in COMPLEXITIES:
            raise DatasetFileError(f"{where}: complexity {self.complexity!r} is not one of {list(COMPLEXITIES)}")
        return self.complexity


class KbQueryRow(_Row):
    """A row of the project's query file (``data/kb_queries.jsonl``)."""

    id: str | int | None = Field(None, description=_ID)
    answer: str | None = Field(None, description=_TEXT)
    answers: list[str] | None = Field(None, description=_TEXTS)
    gold: list[str] | None = Field(None, description='a JSON list of locations, e.g. ["faq.md:L3-L5"]')
    tools: list[str] | None = Field(None, description='a JSON list of tool names, e.g. ["vector_search"]')


class BeirQueryRow(_Row):
    """A row of a BEIR-style ``queries.jsonl`` (HotpotQA's and SQuAD 2.0's extra keys included)."""

    id: str | int | None = Field(None, description=_ID)
    id_: str | int | None = Field(None, alias="_id", description=_ID)
    answers: list[str] | None = Field(None, description=_TEXTS)
    gold_doc_ids: list[str | int] | None = Field(None, description='a JSON list of passage ids, e.g. ["d1", "d2"]')
    context_doc_ids: list[str | int] | str | int | None = Field(None, description=_IDS)
    paired_doc_id: list[str | int] | str | int | None = Field(None, description=_IDS)
    doc_ids: list[str | int] | str | int | None = Field(None, description=_IDS)
    type: str | None = Field(None, description='a JSON string ("bridge" or "comparison")')


class CorpusRow(BaseModel):
    """A passage of a BEIR-style ``corpus.jsonl``."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, populate_by_name=True)

    id: str | int | None = Field(None, description=_ID)
    id_: str | int | None = Field(None, alias="_id", description=_ID)
    title: str | None = Field(None, description=_TEXT)
    text: str | None = Field(None, description=_TEXT)


_Model = TypeVar("_Model", bound=BaseModel)


def _validated(model: type[_Model], row: dict[str, Any], where: str) -> _Model:
    """``row`` as ``model``, or one `DatasetFileError` naming ``where``, the field, what it must be and what it is."""
    try:
        return model.model_validate(row)
    except ValidationError as exc:
        fields = list(dict.fromkeys(str(e["loc"][0]) for e in exc.errors() if e["loc"]))
        if not fields:
            raise DatasetFileError(f"{where}: {exc.errors()[0]['msg']}") from None
        name = fields[0]
        info = next((f for key, f in model.model_fields.items() if name in (key, f.alias)), None)
        expected = info.description if info is not None and info.description else "another type"
        also = f" (also wrong: {', '.join(repr(f) for f in fields[1:])})" if len(fields) > 1 else ""
        raise DatasetFileError(
            f"{where}: field {name!r} must be {expected}, got {_json_kind(row.get(name))} {_short(row.get(name))}{also}"
        ) from None


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list" + (f" holding {_json_kind(next(v for v in value if not isinstance(v, str)))}"
                           if any(not isinstance(v, str) for v in value) else "")
    return "an object" if isinstance(value, dict) else type(value).__name__


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _ids(value: list[str | int] | str | int | None) -> list[str]:
    """Passage ids as strings: a list of them, or one id given alone."""
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _texts(values: Sequence[str]) -> tuple[str, ...]:
    """Non-blank strings in NFC, duplicates dropped, in order."""
    return tuple(dict.fromkeys(nfc(v) for v in values if v.strip()))


# ---- loaders ----------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines file."""
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise DatasetFileError(f"{path}:{n}: not valid JSON ({exc})") from None
            if not isinstance(value, dict):
                raise DatasetFileError(f"{path}:{n}: expected a JSON object, got {type(value).__name__}")
            rows.append((n, value))
    return rows


def _sample(items: Sequence[Any], limit: int | None, seed: int) -> list[Any]:
    """``limit`` items chosen with a seeded RNG, kept in their original order."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    keep = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in keep]


def load_kb_queries(path: str | Path, *, kb: str | Path | None = "data/kb", limit: int | None = None,
                    seed: int = 0) -> EvalSet:
    """The project's labelled questions (``id, question, complexity, answerable, answer, gold``).

    ``answer`` is one short string a correct answer must contain (empty: nothing to check);
    ``gold`` lists ``path`` or ``path:Lstart-Lend`` locations relative to the knowledge base. Each
    row is validated as a `KbQueryRow`; a wrong type raises `DatasetFileError` naming file, line and field.
    """
    path = Path(path)
    queries = []
    for n, (line, raw) in enumerate(_read_jsonl(path), 1):
        where = f"{path}:{line}"
        row = _validated(KbQueryRow, raw, where)
        answers = row.answers if row.answers is not None else [row.answer] if row.answer else []
        queries.append(EvalQuery(
            id=str(row.id) if row.id is not None else f"q{n:03d}",
            question=row.question_text(where),
            answers=_texts(answers),
            answerable=row.answerable,
            complexity=row.complexity_label(where),
            gold=tuple(_gold(g, f"{where}: gold[{i}]") for i, g in enumerate(row.gold or [])),
        ))
    return EvalSet(path.stem, _sample(queries, limit, seed), path, kb=Path(kb) if kb is not None else None,
                   limit=limit, seed=seed)


def _gold(text: str, where: str) -> GoldRef:
    try:
        return GoldRef.parse(text)
    except ValueError as exc:
        raise DatasetFileError(f"{where}: {exc}") from None


def _read_qrels(path: Path) -> dict[str, list[str]]:
    """``query_id -> [doc_id, ...]`` for rows with relevance > 0 (a header row is optional)."""
    gold: dict[str, list[str]] = {}
    if not path.exists():
        return gold
    with path.open(encoding="utf-8", newline="") as fh:
        for n, row in enumerate(csv.reader(fh, delimiter="\t"), 1):
            if not row or (n == 1 and row[0] in ("query_id", "query-id", "qid")):
                continue
            if len(row) < 2:
                raise DatasetFileError(f"{path}:{n}: expected 'query_id<TAB>doc_id[<TAB>relevance]'")
            try:
                relevance = float(row[2]) if len(row) > 2 and row[2].strip() else 1.0
            except ValueError:
                raise DatasetFileError(f"{path}:{n}: relevance must be a number, got {row[2]!r}") from None
            if relevance > 0:
                gold.setdefault(row[0], []).append(row[1])
    return gold


_YES_NO = frozenset({"yes", "no"})
_EITHER = re.compile(r"\S\s+or\s+\S", re.IGNORECASE)


def hotpot_kind(row: Mapping[str, Any], gold_ids: Sequence[str]) -> str | None:
    """``bridge`` or ``comparison`` for a question with two or more gold passages; None otherwise.

    The row's own ``type`` when it has one (HotpotQA's label). Otherwise a comparison is a question
    answered yes/no or asking to choose between two named things (``X or Y``), as HotpotQA's
    comparison questions are; every other two-passage question is a bridge (the second passage is
    found through an entity of the first). The rule is approximate for rows without ``type``.

    >>> hotpot_kind({"question": "Who was born first, Ada or Alan?", "answers": ["Ada"]}, ["a", "b"])
    'comparison'
    >>> hotpot_kind({"question": "Which city hosts the club whose coach is X?", "answers": ["Y"]}, ["a", "b"])
    'bridge'
    """
    if row.get("type") in ("bridge", "comparison"):
        return str(row["type"])
    if len(gold_ids) < 2:
        return None
    answers = {str(a).strip().casefold() for a in row.get("answers", [])}
    return "comparison" if answers & _YES_NO or _EITHER.search(str(row.get("question", ""))) else "bridge"


def load_beir(folder: str | Path, *, limit: int | None = None, seed: int = 0) -> EvalSet:
    """A BEIR-style folder: ``corpus.jsonl`` ({id, title, text}), ``queries.jsonl``, ``qrels.tsv``.

    Queries keep ``answers`` (any one counts), ``answerable`` (default: has answers) and
    ``complexity`` when present. Gold passages come from ``qrels.tsv`` (or ``gold_doc_ids``) and
    become the file paths `EvalSet.write_kb` writes. Call ``write_kb()`` before indexing. Rows are
    validated as `BeirQueryRow` and `CorpusRow`; a wrong type raises `DatasetFileError` naming file,
    line and field.
    """
    folder = Path(folder)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).is_file():
            raise ValueError(f"{folder} is not a BEIR-style dataset: {name} is missing "
                             "(expected corpus.jsonl, queries.jsonl and qrels.tsv)")
    corpus: dict[str, Passage] = {}
    for line, raw in _read_jsonl(folder / "corpus.jsonl"):
        where = f"{folder / 'corpus.jsonl'}:{line}"
        passage = _validated(CorpusRow, raw, where)
        doc = passage.id if passage.id is not None else passage.id_
        if doc is None:
            raise DatasetFileError(f"{where}: passage without 'id'")
        doc_id = str(doc)
        corpus[doc_id] = Passage(doc_id, nfc(passage.title or ""), nfc(passage.text or ""))
    qrels = _read_qrels(folder / "qrels.tsv")
    queries = []
    for n, (line, raw) in enumerate(_read_jsonl(folder / "queries.jsonl"), 1):
        where = f"{folder / 'queries.jsonl'}:{line}"
        row = _validated(BeirQueryRow, raw, where)
        given = row.id if row.id is not None else row.id_
        qid = str(given) if given is not None else f"q{n:04d}"
        gold_ids = qrels.get(qid) or _ids(row.gold_doc_ids)
        missing = [d for d in gold_ids if d not in corpus]
        if missing:
            raise DatasetFileError(f"{where}: gold passage(s) {missing[:3]} are not in corpus.jsonl")
        needs: list[str] = list(gold_ids)
        for key in _DISTRACTOR_KEYS:
            needs += _ids(getattr(row, key))
        answers = _texts(row.answers or [])
        question = row.question_text(where)
        queries.append(EvalQuery(
            id=qid,
            question=question,
            answers=answers,
            answerable=row.answerable if row.answerable is not None else bool(answers),
            complexity=row.complexity_label(where),
            gold=tuple(GoldRef(passage_filename(d)) for d in gold_ids),
            needs=tuple(d for d in dict.fromkeys(needs) if d in corpus),
            kind=hotpot_kind({"type": row.type, "question": question, "answers": list(answers)}, gold_ids),
        ))
    chosen = _sample(queries, limit, seed)
    if limit is None or limit >= len(queries):
        passages = list(corpus.values())
    else:
        needed = {d for q in chosen for d in q.needs}
        passages = [p for p in corpus.values() if p.id in needed]
    return EvalSet(folder.name, chosen, folder, passages=passages, limit=limit if chosen != queries else None,
                   seed=seed)


def load_dataset(path: str | Path, *, limit: int | None = None, seed: int = 0,
                 kb: str | Path | None = None) -> EvalSet:
    """A ``.jsonl`` query file (the project's format) or a BEIR-style folder, by what ``path`` is.

    ``kb`` names the knowledge base a query file is asked against (default ``data/kb``); for a
    BEIR folder it replaces the folder `EvalSet.write_kb` would write.
    """
    path = Path(path)
    if path.is_dir():
        dataset = load_beir(path, limit=limit, seed=seed)
        if kb is not None:
            dataset.kb, dataset.passages = Path(kb), []
        return dataset
    if path.is_file():
        return load_kb_queries(path, kb=kb if kb is not None else "data/kb", limit=limit, seed=seed)
    raise FileNotFoundError(f"no dataset at {path}: give a .jsonl query file or a folder with corpus.jsonl, "
                            "queries.jsonl and qrels.tsv")
