"""Written unanswerable questions with their paragraphs: SQuAD 2.0 train's, as the UnAnsQ data pairs them.

SQuAD 2.0's annotators wrote each unanswerable question against a paragraph about its subject, most
often by changing an answerable one (a swapped name or number, an antonym, a negation). The readers
here had 348 such questions (the workplace's SQuAD 2.0 train excerpt). The data of Zhu et al., "Learning
to Ask Unanswerable Questions for Machine Reading Comprehension" (ACL 2019; GitHub
``haichao592/UnAnsQ``, commit ``2400c75``) pairs 17,473 of SQuAD 2.0 **train**'s unanswerable questions
with an answerable question of the same paragraph, in two files per split (``QG/train-*``, ``QG/dev-*``,
both drawn from SQuAD 2.0 train; ``QG/test-*`` is SQuAD 2.0 dev and is never read). Its paragraphs
file is over the snapshot tool's 4 MiB limit, so `read_pairs` finds each paragraph by the answerable
question in SQuAD v1.1 train, whose questions SQuAD 2.0 train keeps: the paragraph, title and answer
come back as written (the UnAnsQ text is lower-cased and split into tokens; the unanswerable
question is lightly rejoined, `rejoin`). Text from SQuAD: CC BY-SA 4.0; the repository has no
licence file of its own.

>>> rejoin("what was greece 's rate ( in 2009 ) ?")
"what was greece's rate (in 2009)?"
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from crag_lab.learned.data import Pair, squad_pairs
from crag_lab.learned.span_data import SpanExample, answerable, unanswerable

SPLITS = ("train", "dev")
"""The UnAnsQ splits read: both are SQuAD 2.0 train (its ``test`` split is SQuAD 2.0 dev)."""


def rejoin(question: str) -> str:
    """A whitespace-tokenised question with the spaces before punctuation and clitics taken out."""
    question = re.sub(r" (?=[?.,;:!)]|'s\b|n't\b)", "", question)
    return re.sub(r"\( ", "(", question).strip()


def _key(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _lines(source: Path, name: str) -> list[str]:
    """A ``QG`` file of an UnAnsQ checkout (a folder) or of its git directory (``fetch``'s bare copy)."""
    plain = source / "QG" / name
    if plain.is_file():
        return plain.read_text(encoding="utf-8").splitlines()
    try:
        shown = subprocess.run(["git", "--git-dir", str(source), "show", f"HEAD:QG/{name}"], capture_output=True,
                               text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"{source}: no QG/{name} there; give an UnAnsQ checkout or its git directory") from exc
    return shown.stdout.splitlines()


def read_pairs(source: Path, squad: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each unanswerable question of UnAnsQ's ``train`` and ``dev`` splits with its paragraph (title,
    text) and the answerable question of that paragraph with its answer, as SQuAD v1.1 train
    (``squad``) holds them. A pair whose answerable question is not in ``squad``, or is there with two
    different paragraphs, is left out."""
    by_question: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in squad:
        by_question[_key(str(row["question"]))].append(row)
    out = []
    for split in SPLITS:
        asked = _lines(source, f"{split}-answerable-questions.txt")
        unasked = _lines(source, f"{split}-unanswerable-questions.txt")
        if len(asked) != len(unasked):
            raise SystemExit(f"{source}: QG/{split} files differ in length ({len(asked)} vs {len(unasked)})")
        for a, u in zip(asked, unasked, strict=True):
            (_, a_question, *_), (u_id, u_question, *_) = a.split("\t"), u.split("\t")
            found = by_question.get(_key(a_question), [])
            if len({str(r["context"]) for r in found}) != 1:
                continue
            row = found[0]
            out.append({"id": u_id, "split": split, "title": row["title"], "context": row["context"],
                        "question": rejoin(u_question), "answerable_question": row["question"],
                        "answers": row["answers"], "answer_starts": row["answer_starts"]})
    return out


def contrast_examples(pairs: Sequence[Mapping[str, Any]]) -> list[SpanExample]:
    """For each pair, the written unanswerable question against its paragraph (no answer) and the
    paragraph's answerable question at its answer: the same passage, read both ways."""
    out = []
    for pair in pairs:
        out.append(unanswerable(pair, str(pair["context"]), str(pair["title"]), "written-unanswerable"))
        twin = answerable({**pair, "question": pair["answerable_question"]})
        if twin is not None:
            out.append(twin)
    return out


def scorer_pairs(pairs: Sequence[Mapping[str, Any]], *, seed: int = 0) -> list[Pair]:
    """The answer scorer's pairs of each written unanswerable question: units of its paragraph, every
    one negative (`data.squad_pairs`' way with SQuAD 2.0's), their source ``written-unanswerable``."""
    rows = [{"id": p["id"], "title": p["title"], "context": p["context"], "question": p["question"],
             "is_impossible": True, "answers": []} for p in pairs]
    return [replace(q, source="written-unanswerable") for q in squad_pairs(rows, seed=seed)]
