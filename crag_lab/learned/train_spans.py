"""Build the span reader's training and validation examples (and, on CPU, train it).

    python -m crag_lab.learned.train_spans --train-dir DIR --dump .cache/spans     # examples files
    python crag_lab/learned/fit_spans.py --examples .cache/spans/train.json.gz \\
        --val .cache/spans/val.json.gz --base MODEL_DIR --out ADAPTER --device cuda          # the fit

DIR holds ``squad11_train.jsonl.gz`` and ``squad2_train_excerpt.jsonl.gz`` (the README of the
workplace's ``train`` folder names their sources and licences). Validation holds out the SQuAD
articles the answer scorer holds out (`crag_lab.learned.train.held_out_titles`, same seed), so the
grader's fit may still use them, and the SQuAD 2.0 excerpt's articles but the first. The data card
is ``crag_lab/_data/spans/DATA_CARD.md``.

``--written UNANSQ`` (an UnAnsQ checkout or git directory) writes instead the examples that continue
a trained reader on SQuAD 2.0 train's written unanswerable questions (`dump_written`; then
``fit_spans.py --init crag_lab/_data/spans``); tried on CPU and on a GPU, not shipped (the data card).
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from crag_lab.learned.data import held_out_documents
from crag_lab.learned.router_data import read_jsonl
from crag_lab.learned.span_data import SpanExample, build, doc_examples, write_examples
from crag_lab.learned.train import documentation, held_out_titles
from crag_lab.learned.written_unanswerable import contrast_examples, read_pairs

VALIDATION_QUESTIONS = 2000
"""Held-out SQuAD questions measured after training (with their near misses and other articles)."""
DOCS_REPEAT = 6
"""Each documentation example is seen this many times per epoch (they are few beside SQuAD's)."""


def dump(train_dir: Path, out: Path, *, seed: int = 13, docs: bool = False,
         sites: Sequence[str] = (), perturb: float = 0.0) -> dict[str, dict[str, int]]:
    """Write ``train.json.gz`` and ``val.json.gz`` under ``out``; the examples per source of each.

    With ``docs``, templated questions over the READMEs of the installed distributions (and those in
    ``sites``) join them (`span_data.doc_examples`; tried, not shipped: the data card says why). With
    ``perturb``, that share of the training questions also gets a perturbed, unanswerable twin
    (`span_data.perturbed`; tried, not shipped); validation is the same either way."""
    rng = random.Random(seed)
    squad = read_jsonl(train_dir / "squad11_train.jsonl.gz")
    held = held_out_titles(squad, rng)
    excerpt = [r for r in read_jsonl(train_dir / "squad2_train_excerpt.jsonl.gz") if r["is_impossible"]]
    first = sorted({r["title"] for r in excerpt})[0]
    train = build([r for r in squad if r["title"] not in held], [r for r in excerpt if r["title"] == first],
                  perturb_share=perturb, seed=seed)
    val_rows = rng.sample([r for r in squad if r["title"] in held], VALIDATION_QUESTIONS)
    val = build(val_rows, [r for r in excerpt if r["title"] != first], seed=seed + 1)
    if docs:
        add_docs(train, val, sites, seed=seed)
    return write(out, train, val)


def add_docs(train: list[SpanExample], val: list[SpanExample], sites: Sequence[str], *, seed: int) -> None:
    """Templated questions over the installed distributions' READMEs (and those in ``sites``): the
    held-out READMEs' to ``val``, the others' `DOCS_REPEAT` times to ``train``."""
    readmes = documentation(sites)
    held_docs = held_out_documents([name for name, *_ in readmes])
    for name, _, _, body in readmes:
        examples = doc_examples(name, body, seed=seed)
        if name in held_docs:
            val += examples
        else:
            train += examples * DOCS_REPEAT


def write(out: Path, train: Sequence[SpanExample], val: Sequence[SpanExample]) -> dict[str, dict[str, int]]:
    """Write ``train.json.gz`` and ``val.json.gz`` under ``out``; the examples per source of each."""
    out.mkdir(parents=True, exist_ok=True)
    write_examples(out / "train.json.gz", train)
    write_examples(out / "val.json.gz", val)
    return {"train": dict(Counter(e.source for e in train)), "validation": dict(Counter(e.source for e in val))}


def dump_written(train_dir: Path, source: Path, out: Path, *, seed: int = 13, pairs: int | None = None,
                 replay: int | None = None, docs: bool = False, sites: Sequence[str] = ()) -> dict[str, dict[str, int]]:
    """Examples that continue a trained reader on written unanswerable questions (``fit_spans.py --init``):
    UnAnsQ's pairs (`written_unanswerable.read_pairs`, from ``source``) outside the held-out articles, each
    paragraph read both ways, beside the first recipe's examples (`span_data.build`: answerable, near
    misses, other articles) so that it does not forget them. ``pairs`` and ``replay`` draw that many of
    each (the CPU recipe); None keeps all. Validation: the pairs of the held-out articles. ``docs`` and
    ``sites`` add README examples as `dump` does (`add_docs`), after the draw."""
    squad = read_jsonl(train_dir / "squad11_train.jsonl.gz")
    held = held_out_titles(squad, random.Random(seed))
    found = read_pairs(source, squad)
    pick = random.Random(f"written/{seed}")
    chosen = [p for p in found if p["title"] not in held]
    chosen = pick.sample(chosen, min(pairs, len(chosen))) if pairs is not None else chosen
    base = build([r for r in squad if r["title"] not in held], seed=seed)
    base = pick.sample(base, min(replay, len(base))) if replay is not None else base
    train = contrast_examples(chosen) + base
    pick.shuffle(train)
    val = contrast_examples([p for p in found if p["title"] in held])
    if docs:
        add_docs(train, val, sites, seed=seed)
    return write(out, train, val)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crag_lab.learned.train_spans", description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-dir", required=True, help="folder with squad11_train.jsonl.gz and squad2_train_excerpt.jsonl.gz")
    parser.add_argument("--dump", required=True, help="folder to write train.json.gz and val.json.gz to")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--docs", action="store_true", help="add README examples (not in the reader that ships)")
    parser.add_argument("--site", action="append", default=[],
                        help="with --docs: a further site-packages folder whose distributions' READMEs are read too")
    parser.add_argument("--perturb", type=float, default=0.0,
                        help="share of training questions that also get a perturbed, unanswerable twin (not shipped)")
    parser.add_argument("--written", type=Path,
                        help="an UnAnsQ checkout or git directory: write examples that continue a trained reader on "
                             "written unanswerable questions instead (dump_written)")
    parser.add_argument("--pairs", type=int, help="with --written: draw this many pairs (default: all)")
    parser.add_argument("--replay", type=int, help="with --written: draw this many first-recipe examples (default: all)")
    args = parser.parse_args(argv)
    if args.written is not None:
        print(dump_written(Path(args.train_dir), args.written, Path(args.dump), seed=args.seed, pairs=args.pairs,
                           replay=args.replay, docs=args.docs, sites=args.site), flush=True)
        return
    print(dump(Path(args.train_dir), Path(args.dump), seed=args.seed, docs=args.docs, sites=args.site,
               perturb=args.perturb), flush=True)


if __name__ == "__main__":
    main()
