"""Answer-scorer pairs from questions written here over public engineering documents.

The scorer's other documentation pairs are templated ("What is the port of gateway?"), and the
questions people wrote that could be fetched are about Wikipedia (SQuAD, WikiTableQuestions). These
are questions written in this project, in the phrasing engineers use (full questions, terse
queries, indirect ones, some with a typo), over documentation of the kind a knowledge base holds:
configuration references with option tables, environment-variable lists, CLI references, FAQs and
alert runbooks, from public repositories (`SOURCES`: Traefik, Cargo, Poetry, Prometheus, Alertmanager,
Argo CD, NATS and prometheus-operator's runbooks; each document's repository, commit, path and
licence; the folder's README is the data card). About a
quarter are unanswerable: a plausible detail the document never states, set against the line
closest to it. No question was written with the bundled knowledge base, its questions or an
evaluation set in view.

Each document is cut as the runtime cuts a markdown file (`crag_lab.kb._chunking.iter_chunks`) and
each chunk into units (`crag_lab.offline.units.units_of`), keyed as the offline model keys them. For
an answerable question, the positive is the unit of the chunk holding the quoted line that contains
the written answer (the one sharing most words with that line); the negatives are other units of the
same chunk and units of other chunks of the same document. An unanswerable question is a group of
negatives: the units of the chunk holding its nearest line.

    python -m crag_lab.learned.engdocs --mirrors MIRRORS --out DIR   # the documents, as DIR/<name>.md
    python -m crag_lab.learned.engdocs --mirrors MIRRORS --out DIR --queries Q.jsonl   # and an eval set:
    crag-lab eval --dataset Q.jsonl --kb DIR   # the held-out documents' questions, end to end
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from crag_lab.kb._chunking import iter_chunks
from crag_lab.learned.data import Pair, held_out_documents, unit_text
from crag_lab.offline.text import content_terms
from crag_lab.offline.units import units_of

HERE = Path(__file__).resolve().parent / "engdocs"
QUESTIONS = HERE / "questions.jsonl"
SOURCES = HERE / "sources.tsv"
_MARKS = re.compile(r"[`*_\"']")


def _norm(text: str) -> str:
    return " ".join(_MARKS.sub("", text).lower().split())


def sources(path: Path = SOURCES) -> list[dict[str, str]]:
    """One row per document: ``name``, ``repo`` (owner/name), ``commit``, ``path``, ``licence``."""
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def questions(path: Path = QUESTIONS) -> list[dict[str, Any]]:
    """The written questions: ``doc``, ``question`` and either ``answer`` and ``line`` or ``answerable: false`` and
    ``near``."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def export(mirrors: Path, out: Path, rows: Sequence[Mapping[str, str]] | None = None) -> list[Path]:
    """Each document of ``rows`` (default `sources`) as ``out/<name>.md``, read from the git snapshot
    ``mirrors/<owner>+<name>/repo`` at its commit (the snapshot tool's layout)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for row in rows if rows is not None else sources():
        git_dir = mirrors / row["repo"].replace("/", "+") / "repo"
        if not git_dir.exists():
            raise SystemExit(f"crag_lab.learned.engdocs: no snapshot of {row['repo']} at {git_dir}; fetch "
                             f"github:{row['repo']} first")
        text = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{row['commit']}:{row['path']}"],
                              check=True, capture_output=True, text=True).stdout
        target = out / f"{row['name']}.md"
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def _chunks(name: str, text: str) -> list[tuple[str, list[str], list[str]]]:
    """Per chunk: its text, its units keyed ``"Title: unit"`` and the units' raw texts."""
    out = []
    for chunk in iter_chunks(f"{name}.md", text.splitlines(), kind="markdown", title=name):
        units = units_of(1, chunk.text, chunk.title)
        out.append((chunk.text, [unit_text(chunk.title, u) for u in units], [u.text for u in units]))
    return out


def _holding(chunks: Sequence[tuple[str, list[str], list[str]]], line: str) -> int | None:
    want = line.strip()
    return next((k for k, (text, keys, _) in enumerate(chunks)
                 if keys and any(raw.strip() == want for raw in text.splitlines())), None)


def pairs(qs: Sequence[Mapping[str, Any]], docs: Mapping[str, str], *, negatives: int = 3, far: int = 3,
          seed: int = 0) -> tuple[list[Pair], dict[str, int]]:
    """The pairs of the questions whose document is in ``docs`` (name -> markdown), and how many questions
    were kept and skipped (no chunk holds the line, or no unit holds the answer).

    >>> doc = "# Ports\\n\\n| Name | Port |\\n|---|---|\\n| web | 80 |\\n| websecure | 443 |\\n\\n## Logs\\n\\nLogs go to stdout."
    >>> found, counts = pairs([{"doc": "d", "question": "secure port?", "answer": "443", "line": "| websecure | 443 |"}],
    ...                       {"d": doc})
    >>> [(p.text, p.label) for p in found if p.label], counts
    ([('d > Ports: Name: websecure; Port: 443', 1)], {'answerable': 1, 'unanswerable': 0, 'skipped': 0})
    """
    rng = random.Random(seed)
    cut = {name: _chunks(name, text) for name, text in docs.items()}
    out: list[Pair] = []
    counts = {"answerable": 0, "unanswerable": 0, "skipped": 0}
    for k, q in enumerate(qs):
        chunks = cut.get(str(q["doc"]))
        if chunks is None:
            continue
        answerable = q.get("answerable", True) is not False
        at = _holding(chunks, str(q["line"] if answerable else q["near"]))
        if at is None:
            counts["skipped"] += 1
            continue
        _, keys, raw = chunks[at]
        group = f"engdocs/{q['doc']}/{k}"
        others = [key for c, (_, ks, _) in enumerate(chunks) if c != at for key in ks]
        if not answerable:
            out += [Pair(q["question"], key, 0, group, "engdocs-unanswerable") for key in keys[: negatives + far]]
            counts["unanswerable"] += 1
            continue
        answer, line_terms = _norm(str(q["answer"])), set(content_terms(str(q["line"])))
        holding = [i for i, text in enumerate(raw) if answer and answer in _norm(text)]
        if not holding:
            counts["skipped"] += 1
            continue
        best = max(holding, key=lambda i: (len(line_terms & set(content_terms(raw[i]))), -i))
        near = [keys[i] for i in range(len(keys)) if i not in holding]
        far_keys = [key for key in others if answer not in _norm(key)]
        out.append(Pair(q["question"], keys[best], 1, group, "engdocs"))
        out += [Pair(q["question"], key, 0, group, "engdocs")
                for key in rng.sample(near, min(negatives, len(near))) + rng.sample(far_keys, min(far, len(far_keys)))]
        counts["answerable"] += 1
    return out, counts


def read_docs(folder: Path, names: Sequence[str]) -> dict[str, str]:
    """The exported documents (`export`) named ``names``, from ``folder``; a clear stop when one is missing."""
    missing = [n for n in names if not (folder / f"{n}.md").is_file()]
    if missing:
        raise SystemExit(f"crag_lab.learned.engdocs: {folder} lacks {len(missing)} documents ({', '.join(missing[:3])}, "
                         "...); export them with python -m crag_lab.learned.engdocs --mirrors DIR --out FOLDER")
    return {n: (folder / f"{n}.md").read_text(encoding="utf-8") for n in names}


def line_of(text: str, line: str) -> int | None:
    """The 1-based number of the first line of ``text`` that is ``line`` (both stripped), or None."""
    want = line.strip()
    return next((i + 1 for i, raw in enumerate(text.split("\n")) if raw.strip() == want), None)


def eval_rows(qs: Sequence[Mapping[str, Any]], folder: Path,
              docs: set[str] | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The questions about ``docs`` (default: all) as rows of `crag-lab eval`'s query file, against the exported
    documents in ``folder`` as the knowledge base: an answerable question's gold is the line its answer quotes
    (``<name>.md:Ln-Ln``), an unanswerable one has none; and how many were left out (its line is not in the
    document, or its answer, as `crag-lab eval` normalises it, is not in its line). Each row also names its
    ``doc`` (`crag-lab eval` ignores the key)."""
    from crag_lab.eval.metrics import answer_contained

    rows: list[dict[str, Any]] = []
    left = {"line not found": 0, "answer not in its line": 0}
    texts: dict[str, str] = {}
    for k, q in enumerate(qs):
        name = str(q["doc"])
        if docs is not None and name not in docs:
            continue
        text = texts.setdefault(name, (folder / f"{name}.md").read_text(encoding="utf-8"))
        answerable = q.get("answerable", True) is not False
        row: dict[str, Any] = {"id": f"e{k:04d}", "question": q["question"], "complexity": "simple",
                               "answerable": answerable, "answer": "", "gold": [], "doc": name}
        if answerable:
            at = line_of(text, str(q["line"]))
            if at is None:
                left["line not found"] += 1
                continue
            if not answer_contained(str(q["line"]), [str(q["answer"])]):
                left["answer not in its line"] += 1
                continue
            row["answer"], row["gold"] = str(q["answer"]), [f"{name}.md:L{at}-L{at}"]
        rows.append(row)
    return rows, left


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crag_lab.learned.engdocs", description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", required=True, help="folder of git snapshots, <owner>+<name>/repo each")
    parser.add_argument("--out", required=True, help="where the documents go, one <name>.md each")
    parser.add_argument("--queries", help="also write the questions as a crag-lab eval query file here (--kb OUT)")
    parser.add_argument("--all", action="store_true",
                        help="with --queries: every document's questions, not only the documents the engdocs training "
                             "recipe holds out (a scorer trained by it has read the others)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    print(f"exported {len(export(Path(args.mirrors), out))} documents to {out}")
    if args.queries:
        qs = questions()
        held = None if args.all else held_out_documents(sorted({str(q["doc"]) for q in qs}))
        rows, left = eval_rows(qs, out, held)
        Path(args.queries).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"wrote {len(rows)} questions to {args.queries} (left out: {left}); "
              f"crag-lab eval --dataset {args.queries} --kb {out}")


if __name__ == "__main__":
    main()
