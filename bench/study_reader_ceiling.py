"""How much would a reader model add? The ceiling of the offline synthesizer's unit ranking.

The offline synthesizer quotes the best-ranked units of its evidence (`synthesizer.ranked`). Each
question of both KB splits is asked once through the default graph (`knowledge_base`) and through
`naive_rag`; the synthesizer's inputs are kept, and for every answerable question with a gold answer:

- ``shipped``: whether the synthesizer's own answer contains the gold answer (the `make eval` number);
- ``oracle@k``: whether one of its top ``k`` units holds it — what a reader that always picks right
  among those ``k`` would answer (`crag_lab.eval.ceiling`). ``beyond`` counts the questions whose
  evidence holds the answer in no unit at all (not retrieved, or written another way);
- with ``--gemma`` (llama.cpp's server with the bundled Gemma 3 270M; the realmodel extra) or
  ``--reader URL`` (any OpenAI-compatible server), that model is shown the question and the top
  ``k`` units (`pick_prompt`) and asked which one answers, once in the ranking's order and once
  reversed. A reader that reads picks the same unit both ways; one that always says "1" does not.
  A reply naming no passage (or 0) falls back to the top unit, as a deployed reader would.

The frozen test split is only measured here: this study changes nothing that ships.

    .venv/bin/python bench/study_reader_ceiling.py            # writes docs/dev/reader_ceiling.md (+ .json)
    .venv/bin/python bench/study_reader_ceiling.py --gemma    # ... and asks Gemma 3 270M to pick
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from _common import KB, ROOT, log, publish
from study_answerability import capture

from crag_lab.eval import load_dataset
from crag_lab.eval.ceiling import answer_rank, oracle_at, parse_pick, pick_prompt
from crag_lab.eval.metrics import answer_contained
from crag_lab.offline import synthesizer
from crag_lab.offline.reading import read

SPLITS = {"tuning": ROOT / "data" / "kb_queries.jsonl", "test": ROOT / "data" / "kb_queries_test.jsonl"}
MODES = ("knowledge_base", "naive_rag")
KS = (1, 2, 3, 5, 10)
OUT = ROOT / "docs" / "dev" / "reader_ceiling.md"

Pick = Callable[[str, Sequence[str]], "int | None"]


def measure(lab: Any, rows: Sequence[Mapping[str, Any]], mode: str, top: int, pick: Pick | None) -> dict[str, Any]:
    """Ranks, shipped containment and (with ``pick``) the reader's containment for one split and mode."""
    cache = lab.model.vectors
    asked = [r for r in rows if r.get("answerable") and r.get("answers") and r.get("complexity") != "chitchat"]
    evidence = {row["id"]: (ev, seen, answer) for row, ev, seen, answer, _ in capture(lab, asked, mode=mode)}
    ranks: list[int | None] = []
    shipped = 0
    reader = {"ranked": 0, "reversed": 0, "same_unit": 0, "first_in_ranked": 0, "no_pick": 0}
    for row in asked:
        ev, seen, answer = evidence.get(row["id"], ([], [], ""))
        if not ev:
            ranks.append(None)
            continue
        answers = row["answers"]
        texts = [u.unit.text for _, u in synthesizer.ranked(read(row["question"], ev, cache, seen))]
        ranks.append(answer_rank(texts, answers))
        shipped += bool(answer_contained(answer, answers))  # the graph's own answer
        if pick is not None and texts:
            shown = texts[:top]
            forward, backward = pick(row["question"], shown), pick(row["question"], shown[::-1])
            ahead = shown[forward - 1] if forward else shown[0]
            behind = shown[len(shown) - backward] if backward else shown[0]  # its number counts from the end
            reader["ranked"] += bool(answer_contained(ahead, answers))
            reader["reversed"] += bool(answer_contained(behind, answers))
            reader["same_unit"] += ahead == behind
            reader["first_in_ranked"] += forward == 1
            reader["no_pick"] += (not forward) + (not backward)
    n, beyond = len(asked), sum(r is None for r in ranks)
    oracle = {str(k): share for k, share in oracle_at(ranks, KS).items()}
    out: dict[str, Any] = {"questions": n, "shipped": shipped / n if n else 0.0,
                           "oracle": {**oracle, "all": (n - beyond) / n if n else 0.0}, "beyond": beyond}
    if pick is not None:
        out["reader"] = reader  # counts of questions (no_pick: of replies, two per question)
    return out


def server_pick(llm: Any) -> Pick:
    def pick(question: str, texts: Sequence[str]) -> int | None:
        return parse_pick(str(llm.complete(pick_prompt(question, texts)).text), len(texts))
    return pick


def percent(x: float) -> str:
    return f"{100 * x:.1f} %"


def markdown(result: Mapping[str, Any]) -> str:
    lines = ["# The reader ceiling: what a better reader could add on the same evidence", "",
             "Written by `bench/study_reader_ceiling.py` (see its docstring). Per split and mode: the share of",
             "answerable questions whose answer the synthesizer's own answer contains (*shipped*, as in",
             "`make eval`), and the share a reader that always picked right among the synthesizer's top *k*",
             "units would contain (*oracle@k*); *beyond* is the number of questions whose evidence holds",
             "the answer in no unit. The test split is only measured here; the study changes nothing that ships.",
             "", "```bash", ".venv/bin/python bench/study_reader_ceiling.py"
             + (" --gemma" if result.get("reader", "") and "Gemma" in result["reader"] else ""),
             "```", "",
             "| split | mode | questions | shipped | " + " | ".join(f"oracle@{k}" for k in KS)
             + " | oracle@all | beyond |",
             "|---|---|---|---|" + "---|" * len(KS) + "---|---|"]
    for key, r in result["runs"].items():
        split, mode = key.split("/")
        cells = " | ".join(percent(r["oracle"][str(k)]) for k in KS)
        lines.append(f"| {split} | {mode} | {r['questions']} | {percent(r['shipped'])} | {cells} | "
                     f"{percent(r['oracle']['all'])} | {r['beyond']} |")
    readers = {k: r["reader"] for k, r in result["runs"].items() if "reader" in r}
    if readers:
        lines += ["", f"Reader: {result['reader']}, shown the top {result['top']} units, asked once in the"
                  " ranking's order and once reversed (a reply naming no passage falls back to the top unit):", "",
                  "| split | mode | reader, ranked order | reader, reversed | same unit both ways | "
                  "picked the first (ranked) | replies naming no passage |",
                  "|---|---|---|---|---|---|---|"]
        for key, r in readers.items():
            split, mode = key.split("/")
            n = result["runs"][key]["questions"]
            lines.append(f"| {split} | {mode} | {percent(r['ranked'] / n)} | {percent(r['reversed'] / n)} | "
                         f"{r['same_unit']} of {n} | {r['first_in_ranked']} of {n} | {r['no_pick']} of {2 * n} |")
        lines += ["", "A reader that reads picks the same unit in both orders and holds the answer about as often;",
                  "one that names the first position copies the ranking in one order and inverts it in the other."]
    else:
        lines += ["", "No reader was asked in this run. Gemma 3 270M as a reader, measured once on an earlier commit's "
                  "evidence: [reader_ceiling_gemma.md](reader_ceiling_gemma.md)."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemma", action="store_true", help="ask llama.cpp's server with Gemma 3 270M to pick")
    parser.add_argument("--reader", help="an OpenAI-compatible server's URL (…/v1) to ask instead")
    parser.add_argument("--model", help="the model name on --reader's server (default: its first)")
    parser.add_argument("--top", type=int, default=5, help="units shown to the reader (default 5)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    from crag_lab import Lab
    from crag_lab.servers import GEMMA_ID, openai_compatible, start_llama_server

    server = start_llama_server(threads=2, parallel=1, context=4096) if args.gemma else None
    try:
        pick, reader = None, None
        if server is not None:
            pick, reader = server_pick(openai_compatible(server.url, GEMMA_ID, chat=False, max_tokens=4)), \
                "Gemma 3 270M (Q4_K_M, llama.cpp, greedy)"
        elif args.reader:
            pick, reader = server_pick(openai_compatible(args.reader, args.model, max_tokens=4)), args.reader
        lab = Lab.from_directory(KB, remote=False)
        runs = {}
        for split, path in SPLITS.items():
            rows = [q.row() for q in load_dataset(path).queries]
            for mode in MODES:
                log(f"reader ceiling: {split} / {mode}")
                runs[f"{split}/{mode}"] = measure(lab, rows, mode, args.top, pick)
    finally:
        if server is not None:
            server.stop()
    result = {"runs": runs, "top": args.top, "reader": reader}
    publish(OUT, markdown(result), result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
