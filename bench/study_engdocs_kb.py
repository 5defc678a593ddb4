"""The offline reader on documents nobody here tuned a rule on: the questions written over public
engineering documents (`crag_lab.learned.engdocs`) asked against those documents as a knowledge base.

The KB splits were read while the rules were written (the tuning split) or are frozen and read
once (the test split); HotpotQA and SQuAD 2.0 are Wikipedia prose. This set is neither: 177
configuration references, CLI references, FAQs and alert runbooks from eight public repositories
(MIT / Apache-2.0, `crag_lab/learned/engdocs/README.md`), with questions written here in the
phrasing engineers use, about a quarter of them unanswerable (a plausible detail the document never
states). No reader rule, weight or threshold was set on it, and the scorer that ships never trained
on it. The questions asked are those of the documents the ``engdocs`` training recipe holds out
(`crag_lab.learned.data.held_out_documents`, one in five by a hash of the name), so a scorer trained
by that recipe is read fairly too; the knowledge base holds all 177 documents.

Each question goes through the default graph once (`study_answerability.capture`): its answer there
is the ``graph (what ships)`` row (and once through ``naive_rag``, the ``naive_rag (graph)`` row), and
the evidence the synthesizer was handed is then read every way `bench/study_reader.py` reads the KB
splits (the same variants: the rules, the learned reader, one rule removed at a time), plus the
learned reader at each weight of its grid, the scorer deciding when to abstain with the rules, and
the span reader's gate at other margins. A question the graph keeps no evidence for (it answers
that it found nothing) or sends to small talk reaches no synthesizer; it counts as an abstention in
every row.

Gold: the document's line that the written answer quotes (an answerable question), none for an
unanswerable one. Metrics as `crag-lab eval` defines them. Questions whose written answer, after
`crag-lab eval`'s normalisation, is not in its line are left out (counted in the report).

    .venv/bin/python bench/study_engdocs_kb.py --mirrors /work/.mirror   # writes docs/dev/engdocs_kb.md and .json

It needs the eight repositories' snapshots (``fetch github:<owner>/<name>``; the layout
``MIRRORS/<owner>+<name>/repo``) and says so when one is missing. Nothing here changes what ships.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _common import ROOT, SCRATCH, log, publish
from study_answerability import capture
from study_reader import _lines, patched, pct, score, variants

from crag_lab.eval import metrics as m
from crag_lab.learned.data import held_out_documents
from crag_lab.learned.engdocs import eval_rows, export, questions
from crag_lab.learned.spans import DOUBT_DIR
from crag_lab.offline import synthesizer
from crag_lab.offline.vectors import VectorCache
from crag_lab.prompts import NO_EVIDENCE_ANSWER

HERE = SCRATCH / "engdocs_kb"
OUT = ROOT / "docs" / "dev" / "engdocs_kb.md"
WEIGHTS = (0.25, 0.5, 1.0, 2.0)
MARGINS = (0.0, 3.0, 6.0, 12.0)


def cases(lab: Any, kb: Path, rows: Sequence[Mapping[str, Any]],
          mode: str = "knowledge_base") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the captured cases, the rows that reached no synthesizer), asked in graph ``mode``, captured once into
    ``HERE``."""
    saved = HERE / f"evidence-{mode}.json"
    if saved.is_file():
        found = json.loads(saved.read_text(encoding="utf-8"))
        if [r["id"] for r in found["rows"]] == [r["id"] for r in rows]:
            return found["cases"], found["unreached"]
    files: dict[str, list[str]] = {}
    out, reached = [], set()
    for row, evidence, seen, answer, complexity in capture(lab, rows, mode):
        for item in evidence:
            item["line"], item["line_end"] = _lines(str(item.get("path", "")), str(item["text"]), files, kb)
        reached.add(row["id"])
        out.append({"id": row["id"], "question": row["question"], "answers": [row["answer"]] if row["answer"] else [],
                    "answerable": row["answerable"], "doc": row["doc"],
                    "gold": [[g.path, g.start, g.end] for g in map(m.GoldRef.parse, row["gold"])],
                    "evidence": evidence, "seen": seen, "complexity": complexity, "graph_answer": answer})
    unreached = [dict(r) for r in rows if r["id"] not in reached]
    saved.write_text(json.dumps({"rows": list(rows), "cases": out, "unreached": unreached}), encoding="utf-8")
    return out, unreached


def scored(cases: Sequence[Mapping[str, Any]], answer: Any, unreached: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`study_reader.score` over the reached ``cases`` and the ``unreached`` questions, each of those answered with
    the graph's no-evidence answer (an abstention; no containment, no citation)."""
    gave_up = [{"answerable": r["answerable"], "answers": [], "gold": [], "evidence": [], "unreached": True}
               for r in unreached]
    return score([*cases, *gave_up], lambda c: NO_EVIDENCE_ANSWER if c.get("unreached") else answer(c))


def markdown(result: Mapping[str, Any]) -> str:
    keys = ("containment", "exact_match", "token_f1", "citation_precision", "abstention", "false_abstention")
    base = result["rows"]["rules"]
    lines = ["# The offline reader on engineering documents nobody tuned it on", "",
             "Written by `bench/study_engdocs_kb.py` (see its docstring); nothing here changes what ships. "
             f"{result['questions']} questions ({result['answerable']} answerable, {result['unanswerable']} "
             f"unanswerable) written over the {result['docs']} engineering documents the `engdocs` training recipe "
             f"holds out, asked against all {result['kb_docs']} as one knowledge base; "
             f"{result['unreached']} reached no synthesizer (the graph kept no evidence for them, or called them "
             f"small talk) and count as abstentions; left out: {', '.join(f'{v} ({k})' for k, v in result['left_out'].items())}. "
             "Percentages; exact match and token F1 on the answer's short form, as `crag-lab eval` scores it.", "",
             "| reader | containment | exact match | token F1 | citation precision | abstention on unanswerable | "
             "false abstention | containment against `rules` |", "|---|---|---|---|---|---|---|---|"]
    for name, r in result["rows"].items():
        d = 100 * (r["containment"] - base["containment"])
        lines.append(f"| {name} | " + " | ".join(pct(r[k]) for k in keys) + f" | {d:+.1f} |")
    lines += ["", f"`learned, weight w`: the learned reader (rules abstain) with `synthesizer.LEARNED_WEIGHT` = w "
              f"(ships {synthesizer.LEARNED_WEIGHT}, the tuning split's pick). `either abstains`: the rules' support "
              "or the scorer's probability below its own threshold withholds (`LEARNED_ABSTAINS_BY = \"either\"`); "
              "with `rules' ranking` the scorer only decides when to abstain (weight 0). `span reader's unit first at "
              f"margin m`: `synthesizer.SPAN_FIRST_MARGIN` = m (ships {synthesizer.SPAN_FIRST_MARGIN:g}). "
              "`graph (what ships)`: the answer the "
              "default graph gave when the evidence was captured (the `rules` row reads the same evidence again); "
              "`naive_rag (graph)`: the same questions asked in `naive_rag` mode (one vector search, no grading, no "
              "router; its own evidence, which no other row reads). "
              f"One question is {100 / result['answerable']:.1f} points of containment here."]
    if result.get("candidate"):
        lines += ["", f"The learned rows read a candidate scorer (`{result['candidate']}`), not the one that ships."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", required=True, help="folder of git snapshots, <owner>+<name>/repo each")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--scorer", help="a scorer folder other than the one that ships (a candidate)")
    parser.add_argument("--out", help="where a candidate's report goes (default: docs/dev/engdocs_kb.md)")
    parser.add_argument("--only", action="append", default=[], help="measure only this variant (repeatable)")
    args = parser.parse_args(argv)
    from crag_lab import Lab
    from crag_lab.learned import AnswerScorer, SpanReader

    kb = HERE / "kb"
    if not kb.is_dir() or not any(kb.glob("*.md")):
        export(Path(args.mirrors), kb)
    qs = questions()
    names = sorted({str(q["doc"]) for q in qs})
    held = held_out_documents(names)
    rows, left = eval_rows(qs, kb, held)
    log(f"engdocs KB study: {len(rows)} questions over {len(held)} documents; left out {left}")
    scorer = AnswerScorer.load(args.scorer)
    spans = SpanReader.load()
    doubter = SpanReader.load(DOUBT_DIR)
    lab = Lab.from_directory(kb, remote=False)
    found, unreached = cases(lab, kb, rows)
    naive, naive_unreached = cases(lab, kb, rows, "naive_rag")
    cache = VectorCache()
    table: dict[str, dict[str, Any]] = {
        "graph (what ships)": scored(found, lambda c: c["graph_answer"], unreached),
        "naive_rag (graph)": scored(naive, lambda c: c["graph_answer"], naive_unreached)}
    every = dict(variants(scorer, spans, doubter))
    for w in WEIGHTS:
        every[f"learned, weight {w}"] = (lambda w=w: patched(synthesizer, LEARNED_WEIGHT=w, LEARNED_ABSTAINS_BY="rules"),
                                         scorer, spans, True, None)
    every["learned (either abstains)"] = (lambda: patched(synthesizer, LEARNED_ABSTAINS_BY="either"),
                                          scorer, spans, True, None)
    every["rules' ranking, either abstains"] = (lambda: patched(synthesizer, LEARNED_WEIGHT=0.0,
                                                                LEARNED_ABSTAINS_BY="either"), scorer, spans, True, None)
    for margin in MARGINS:
        every[f"span reader's unit first at margin {margin:g}"] = (
            lambda margin=margin: patched(synthesizer, SPAN_FIRST_MARGIN=margin), None, spans, True, None)
    for variant, (context, reader, lead, first, doubts) in every.items():
        if args.only and variant not in args.only and variant != "rules":
            continue
        log(f"engdocs KB study: {variant}")
        with context():
            table[variant] = scored(found, lambda c, r=reader, sp=lead, f=first, dr=doubts: synthesizer.respond(
                c["question"], c["evidence"], cache, r, sp, f, c.get("seen", []), dr, c.get("complexity"))[0],
                unreached)
    answerable = sum(1 for r in rows if r["answerable"])
    result = {"rows": table, "questions": len(rows), "answerable": answerable, "unanswerable": len(rows) - answerable,
              "docs": len(held), "kb_docs": len(list(kb.glob("*.md"))), "unreached": len(unreached), "left_out": left,
              "candidate": args.scorer}
    publish(ROOT / args.out if args.out else OUT, markdown(result), result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
