"""Labelled query sets: the project's ``kb_queries.jsonl`` and BEIR-style passage folders.

A BEIR-style folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels.tsv``) is a passage corpus, not a
knowledge base. `EvalSet.write_kb` turns it into one, explicitly: one Markdown file per passage
(``# Title`` then the text, one sentence per line), named by a slug of the passage id, so the gold
location of a passage is simply its file path. With ``limit`` only a sample of queries is kept and
the corpus shrinks to the passages those queries need (their gold passages plus their listed
distractors: HotpotQA's ``context_doc_ids``, SQuAD 2.0's ``paired_doc_id``).

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
from typing import Any

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


# ---- loaders ----------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON ({exc})") from None
            if not isinstance(value, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object, got {type(value).__name__}")
            rows.append(value)
    return rows


def _question(row: Mapping[str, Any], where: str) -> str:
    question = row.get("question", row.get("query", row.get("text")))
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: no 'question' text")
    return question


def _complexity(row: Mapping[str, Any], where: str) -> str | None:
    value = row.get("complexity")
    if value is None:
        return None
    if value not in COMPLEXITIES:
        raise ValueError(f"{where}: complexity {value!r} is not one of {list(COMPLEXITIES)}")
    return str(value)


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
    ``gold`` lists ``path`` or ``path:Lstart-Lend`` locations relative to the knowledge base.
    """
    path = Path(path)
    queries = []
    for n, row in enumerate(_read_jsonl(path), 1):
        where = f"{path}:{n}"
        answer = row.get("answer", "")
        answers = row.get("answers", [answer] if answer else [])
        queries.append(EvalQuery(
            id=str(row.get("id", f"q{n:03d}")),
            question=_question(row, where),
            answers=tuple(str(a) for a in answers if str(a).strip()),
            answerable=bool(row["answerable"]) if "answerable" in row else None,
            complexity=_complexity(row, where),
            gold=tuple(GoldRef.parse(g) for g in row.get("gold", [])),
        ))
    return EvalSet(path.stem, _sample(queries, limit, seed), path, kb=Path(kb) if kb is not None else None,
                   limit=limit, seed=seed)


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
                raise ValueError(f"{path}:{n}: expected 'query_id<TAB>doc_id[<TAB>relevance]'")
            relevance = float(row[2]) if len(row) > 2 and row[2].strip() else 1.0
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
    become the file paths `EvalSet.write_kb` writes. Call ``write_kb()`` before indexing.
    """
    folder = Path(folder)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).is_file():
            raise ValueError(f"{folder} is not a BEIR-style dataset: {name} is missing "
                             "(expected corpus.jsonl, queries.jsonl and qrels.tsv)")
    corpus: dict[str, Passage] = {}
    for n, row in enumerate(_read_jsonl(folder / "corpus.jsonl"), 1):
        if "id" not in row and "_id" not in row:
            raise ValueError(f"{folder / 'corpus.jsonl'}:{n}: passage without 'id'")
        doc_id = str(row.get("id", row.get("_id")))
        corpus[doc_id] = Passage(doc_id, str(row.get("title") or ""), str(row.get("text") or ""))
    qrels = _read_qrels(folder / "qrels.tsv")
    queries = []
    for n, row in enumerate(_read_jsonl(folder / "queries.jsonl"), 1):
        where = f"{folder / 'queries.jsonl'}:{n}"
        qid = str(row.get("id", row.get("_id", f"q{n:04d}")))
        gold_ids = qrels.get(qid) or [str(d) for d in row.get("gold_doc_ids", [])]
        missing = [d for d in gold_ids if d not in corpus]
        if missing:
            raise ValueError(f"{where}: gold passage(s) {missing[:3]} are not in corpus.jsonl")
        needs: list[str] = list(gold_ids)
        for key in _DISTRACTOR_KEYS:
            value = row.get(key)
            needs += [str(v) for v in value] if isinstance(value, list) else [str(value)] if value else []
        answers = tuple(dict.fromkeys(str(a) for a in row.get("answers", []) if str(a).strip()))
        queries.append(EvalQuery(
            id=qid,
            question=_question(row, where),
            answers=answers,
            answerable=bool(row.get("answerable", bool(answers))),
            complexity=_complexity(row, where),
            gold=tuple(GoldRef(passage_filename(d)) for d in gold_ids),
            needs=tuple(d for d in dict.fromkeys(needs) if d in corpus),
            kind=hotpot_kind(row, gold_ids),
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
