"""Build the scorer's training set and train its LoRA adapter: ``python -m crag_lab.learned.train``.

Eight recipes (``--recipe``), the same code, sized for the machine or continuing the one that ships:

- ``cpu`` (about half an hour on two cores): 6,000 SQuAD questions, the adapter on the attention's
  query/key/value projections, one epoch of batches of 32.
- ``contrast`` (about half an hour on two cores): continues the adapter that ships (``--init``, default
  the shipped folder) on near-miss unanswerable questions made from answerable ones (`perturbed_pairs`:
  an antonym, a negation, another name of the article, another number, each against the sentence that
  answered the original, which stays a positive beside it), 8,000 SQuAD questions, with a replay of
  the other sources so that what it read before is not forgotten; one epoch of batches of 32.
- ``tables`` (about twenty minutes on two cores): continues the adapter that ships on the lookup
  questions people wrote about Wikipedia tables (WikiTableQuestions' training split, ``--wtq``, a
  clone of github.com/ppasupat/WikiTableQuestions; `crag_lab.learned.table_data`), with the same
  kind of replay (1,500 SQuAD questions); one epoch of batches of 32.
- ``rows`` (about twenty minutes on two cores): the same, with templated lookups over those tables
  instead of the questions people wrote (a row named by its subject, one other column asked:
  `table_data.row_pairs`), the shape of a knowledge base's table questions. Tried, not shipped (the
  data card): the shipped adapter already reads such lookups, and the KB read worse after.
- ``gpu``: every SQuAD v1.1 train question outside the held-out articles, near-miss unanswerable
  groups from the question's own article, the READMEs of every environment named with ``--site``,
  and an adapter on every linear layer, two epochs of batches of 256. Run it in three steps:
  ``--dump-pairs pairs.json.gz`` here, ``python crag_lab/learned/fit.py --pairs pairs.json.gz --base
  MODEL_DIR --out ADAPTER --device cuda ...`` there (it needs torch, transformers and peft only), and
  ``--adapter ADAPTER`` here to measure it on the held-out data and write the card.
- ``written``: the ``gpu`` recipe from a fresh adapter, with the written unanswerable questions of
  SQuAD 2.0 train that UnAnsQ pairs with their paragraphs (``--written``, an UnAnsQ checkout or git
  directory; `crag_lab.learned.written_unanswerable`): those of the held-out articles are validation.
  The same three steps. Tried on a GPU, not shipped (the data card: the grader does not gain).
- ``engdocs`` (about half an hour on two cores): continues the adapter that ships on the questions
  written here over public engineering documents (``--engdocs``, the folder `crag_lab.learned.engdocs`
  exports them to: option tables, environment variables, CLI references, FAQs, alert runbooks), each
  pair seen twice, with the ``tables`` recipe's replay (1,500 SQuAD questions and the READMEs); one
  in five documents is held out for validation.
- ``mixed``: the ``gpu`` recipe from a fresh adapter, with 20,000 of its own questions also made
  unanswerable by a near-miss change (as ``contrast`` makes them), so that the changes are learnt
  beside everything else rather than on top of it. The same three steps. Tried, not shipped (the data
  card): it read the near-miss changes, and the knowledge base's test split and HotpotQA a little worse.

Seeded and resumable: the pairs are drawn with ``--seed``, the batches in a seeded order, and a
checkpoint is written every ``--checkpoint-every`` steps to ``--work`` (`crag_lab.learned.fit`). The
finished adapter, head, ``scorer.json`` and the measured numbers go to ``--out`` (default: the
folder that ships, ``crag_lab/_data/scorer``).

Sources (``--train-dir`` is the folder with ``squad11_train.jsonl.gz`` and
``squad2_train_excerpt.jsonl.gz``; the documentation is the markdown README of every permissively
licensed distribution installed beside crag_lab, crag_lab itself excluded) are described in the data
card. Nothing here reads an evaluation set or the bundled knowledge base.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from crag_lab.learned import fit as fitting
from crag_lab.learned.data import (
    Pair,
    cross_doc_pairs,
    doc_pairs,
    held_out_documents,
    other_article_pairs,
    perturbed_pairs,
    same_article_pairs,
    squad_pairs,
)
from crag_lab.learned.engdocs import pairs as engdoc_pairs
from crag_lab.learned.engdocs import questions as engdoc_questions
from crag_lab.learned.engdocs import read_docs as read_engdocs
from crag_lab.learned.readmes import documentation
from crag_lab.learned.router_data import read_jsonl
from crag_lab.learned.scorer import SCORER_DIR, AnswerScorer, ScorerCard
from crag_lab.learned.table_data import row_pairs, wtq_pairs
from crag_lab.learned.written_unanswerable import read_pairs, scorer_pairs


@dataclass(frozen=True)
class Recipe:
    """How much data, which sources and which adapter."""

    questions: int  # SQuAD v1.1 train questions drawn (0: all outside the held-out articles)
    other_share: float  # share of questions also set against another article's paragraph
    same_share: float  # share also set against another paragraph of their own article
    doc_limit: int  # templated groups per README
    docs_repeat: int  # each README pair is seen this many times per epoch (they are few beside SQuAD's)
    rank: int
    targets: str
    lr: float
    batch: int
    epochs: float
    max_length: int
    warmup: int
    perturbed: int = 0  # further questions drawn for `perturbed_pairs` (0: none)
    continues: bool = False  # train on from an adapter (``--init``) instead of a fresh one
    tables: bool = False  # add WikiTableQuestions' lookup questions (``--wtq``, `table_data.wtq_pairs`)
    rows: bool = False  # add templated lookups over WikiTableQuestions' tables (``--wtq``, `table_data.row_pairs`)
    written: bool = False  # add SQuAD 2.0 train's written unanswerable questions (``--written``, UnAnsQ's pairs)
    engdocs: int = 0  # times each pair of the questions written over engineering documents is seen (``--engdocs``)


RECIPES = {
    "cpu": Recipe(6000, 0.25, 0.0, 60, 3, 16, "qkv", 5e-4, 32, 1.0, 96, 50),
    "gpu": Recipe(0, 0.25, 0.25, 150, 6, 16, "all", 1e-3, 256, 2.0, 128, 200),
    "contrast": Recipe(2500, 0.25, 0.25, 150, 1, 16, "all", 2e-4, 32, 1.0, 128, 50, perturbed=8000, continues=True),
    "tables": Recipe(1500, 0.25, 0.25, 150, 1, 16, "all", 2e-4, 32, 1.0, 128, 50, continues=True, tables=True),
    "rows": Recipe(1500, 0.25, 0.25, 150, 1, 16, "all", 2e-4, 32, 1.0, 128, 50, continues=True, rows=True),
    "mixed": Recipe(0, 0.25, 0.25, 150, 6, 16, "all", 1e-3, 256, 2.0, 128, 200, perturbed=20000),
    "written": Recipe(0, 0.25, 0.25, 150, 6, 16, "all", 1e-3, 256, 2.0, 128, 200, written=True),
    "engdocs": Recipe(1500, 0.25, 0.25, 150, 1, 16, "all", 2e-4, 32, 1.0, 128, 50, continues=True, engdocs=2),
}


@dataclass(frozen=True)
class TrainingSet:
    """The pairs to train and validate on, the documentation read (name, version, licence) and
    the documents held out for validation."""

    train: list[Pair]
    val: list[Pair]
    docs: list[tuple[str, str, str]]
    held_docs: list[str]


def held_out_titles(squad: Sequence[Mapping[str, Any]], rng: random.Random | int) -> set[str]:
    """The SQuAD v1.1 train articles held out of training (one in twenty), drawn by ``rng`` (or its seed):
    the scorer never trains on them, so the grader's fit (bench/fit_grader.py) may use them."""
    rng = random.Random(rng) if isinstance(rng, int) else rng
    titles = sorted({str(r["title"]) for r in squad})
    rng.shuffle(titles)
    return set(titles[: len(titles) // 20])


def build(train_dir: Path, *, recipe: Recipe, seed: int, sites: Sequence[str] = (), wtq: Path | None = None,
          written: Path | None = None, engdocs: Path | None = None) -> TrainingSet:
    """The training and validation pairs. Validation holds out whole SQuAD articles, whole documents and
    (with ``wtq``, a WikiTableQuestions checkout, for a recipe with ``tables``) whole tables; with
    ``written`` (an UnAnsQ checkout, for a recipe with ``written``) its pairs join, by article."""
    if (recipe.tables or recipe.rows) and (wtq is None or not (wtq / "data" / "training.tsv").exists()):
        raise SystemExit(f"crag_lab.learned.train: this recipe reads WikiTableQuestions, and {wtq} holds no "
                         "data/training.tsv; pass --wtq with a clone of https://github.com/ppasupat/WikiTableQuestions")
    if recipe.written and written is None:
        raise SystemExit("crag_lab.learned.train: this recipe reads UnAnsQ's written unanswerable questions; pass "
                         "--written with a clone (or git directory) of https://github.com/haichao592/UnAnsQ")
    if recipe.engdocs and engdocs is None:
        raise SystemExit("crag_lab.learned.train: this recipe reads the questions written over engineering documents; "
                         "pass --engdocs with the folder python -m crag_lab.learned.engdocs exported them to")
    rng = random.Random(seed)
    squad = read_jsonl(train_dir / "squad11_train.jsonl.gz")
    held_titles = held_out_titles(squad, rng)
    train_rows = [r for r in squad if r["title"] not in held_titles]
    val_rows = [r for r in squad if r["title"] in held_titles]
    wanted = recipe.questions or len(train_rows)
    train_rows = rng.sample(train_rows, min(wanted, len(train_rows)))
    val_rows = rng.sample(val_rows, min(max(min(wanted // 10, 2000), 200), len(val_rows)))
    excerpt = [r for r in read_jsonl(train_dir / "squad2_train_excerpt.jsonl.gz") if r["is_impossible"]]
    ex_titles = sorted({r["title"] for r in excerpt})
    docs = documentation(sites)
    doc_sets = [doc_pairs(name, body, seed=seed, limit=recipe.doc_limit) for name, _, _, body in docs]
    held = held_out_documents([name for name, *_ in docs])
    held_docs = {i for i in range(len(docs)) if docs[i][0] in held}
    train_docs = [d for i, d in enumerate(doc_sets) if i not in held_docs]
    val_docs = [d for i, d in enumerate(doc_sets) if i in held_docs]

    def near_miss(rows: Sequence[dict[str, Any]], s: int) -> list[Pair]:
        return same_article_pairs(rows, share=recipe.same_share, seed=s) if recipe.same_share else []

    drawn = {r["id"] for r in train_rows}
    # questions left over to perturb; when every training question was drawn (``mixed``), some of those
    rest = ([r for r in squad if r["title"] not in held_titles and r["id"] not in drawn] or list(train_rows)
            if recipe.perturbed else [])
    contrast = perturbed_pairs(rng.sample(rest, min(recipe.perturbed, len(rest))), share=1.0, seed=seed) if rest else []
    tables = (wtq_pairs(wtq, seed=seed), wtq_pairs(wtq, held_out=True, seed=seed + 1)) if recipe.tables and wtq else ([], [])
    if recipe.rows and wtq:
        tables = (row_pairs(wtq, seed=seed), row_pairs(wtq, held_out=True, seed=seed + 1))
    found = read_pairs(written, squad) if recipe.written and written is not None else []
    eng_train: list[Pair] = []
    eng_val: list[Pair] = []
    if recipe.engdocs and engdocs is not None:
        qs = engdoc_questions()
        names = sorted({str(q["doc"]) for q in qs})
        held_eng = held_out_documents(names)
        texts = read_engdocs(engdocs, names)
        eng_train = engdoc_pairs(qs, {n: t for n, t in texts.items() if n not in held_eng}, seed=seed)[0]
        eng_val = engdoc_pairs(qs, {n: t for n, t in texts.items() if n in held_eng}, seed=seed + 1)[0]
    train = (contrast + tables[0] + squad_pairs(train_rows, seed=seed)
             + scorer_pairs([p for p in found if p["title"] not in held_titles], seed=seed)
             + other_article_pairs(train_rows, share=recipe.other_share, seed=seed)
             + near_miss(train_rows, seed)
             + squad_pairs([r for r in excerpt if r["title"] == ex_titles[0]], seed=seed)
             + ([p for d in train_docs for p in d] + cross_doc_pairs(train_docs, seed=seed)) * recipe.docs_repeat
             + eng_train * recipe.engdocs)
    val = (squad_pairs(val_rows, seed=seed + 1) + other_article_pairs(val_rows, share=0.25, seed=seed + 1)
           + same_article_pairs(val_rows, share=0.25, seed=seed + 1)
           + (perturbed_pairs(val_rows, share=0.5, seed=seed + 1) if recipe.perturbed else [])
           + squad_pairs([r for r in excerpt if r["title"] != ex_titles[0]], seed=seed + 1)
           + [p for d in val_docs for p in d] + cross_doc_pairs(val_docs, seed=seed + 1) + tables[1]
           + scorer_pairs([p for p in found if p["title"] in held_titles], seed=seed + 1) + eng_val)
    return TrainingSet(train, val, [(n, v, lic) for n, v, lic, _ in docs], sorted(docs[i][0] for i in held_docs))


def _auroc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores)) if 0 < labels.sum() < len(labels) else None


def evaluate(predict: Any, pairs: Sequence[Pair]) -> dict[str, Any]:
    """Per source: pair accuracy at 0.5, AUROC, and for answerable groups how often the positive ranks first;
    plus the best score of every unanswerable group, for the abstention threshold."""
    scores = predict([(p.question, p.text) for p in pairs])
    labels = np.array([p.label for p in pairs])
    report: dict[str, Any] = {}
    for source in sorted({p.source for p in pairs}):
        idx = np.array([i for i, p in enumerate(pairs) if p.source == source])
        groups: dict[str, list[int]] = {}
        for i in idx:
            groups.setdefault(pairs[i].group, []).append(int(i))
        answerable = [g for g in groups.values() if labels[g].sum() > 0 and len(g) > 1]
        top1 = [labels[g][int(np.argmax(scores[g]))] == 1 for g in answerable]
        report[source] = {
            "pairs": len(idx), "accuracy": float(((scores[idx] >= 0.5) == labels[idx]).mean()),
            "auroc": _auroc(labels[idx], scores[idx]),
            "top1": float(np.mean(top1)) if top1 else None, "groups": len(groups),
        }
    best_answerable = [float(scores[g].max()) for g in _groups(pairs).values() if labels[g].sum() > 0]
    best_unanswerable = [float(scores[g].max()) for g in _groups(pairs).values() if labels[g].sum() == 0]
    report["_best"] = {"answerable": best_answerable, "unanswerable": best_unanswerable}
    report["_all"] = {"accuracy": float(((scores >= 0.5) == labels).mean()), "auroc": _auroc(labels, scores)}
    return report


def _groups(pairs: Sequence[Pair]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        out.setdefault(p.group, []).append(i)
    return out


def abstention_threshold(best_answerable: Sequence[float], best_unanswerable: Sequence[float],
                         max_false: float = 0.15) -> float:
    """The highest threshold on a group's best score that abstains on at most ``max_false`` of the
    answerable groups: it abstains on as many unanswerable groups as that allows."""
    ranked = np.sort(np.asarray(best_answerable))
    return float(ranked[int(np.floor(max_false * len(ranked)))]) if len(ranked) else 0.5


def train(args: argparse.Namespace) -> None:
    import torch

    recipe = RECIPES[args.recipe]
    torch.set_num_threads(args.threads)
    data = build(Path(args.train_dir), recipe=recipe, seed=args.seed, sites=args.site,
                 wtq=Path(args.wtq) if args.wtq else None, written=Path(args.written) if args.written else None,
                 engdocs=Path(args.engdocs) if args.engdocs else None)
    pairs = data.train
    print(f"training pairs: {len(pairs)} {dict(Counter(p.source for p in pairs))}; validation {len(data.val)}", flush=True)
    if args.dump_pairs:
        fitting.write_pairs(args.dump_pairs, [(p.question, p.text, p.label) for p in pairs])
        print(f"wrote {args.dump_pairs}: fit it with python crag_lab/learned/fit.py --pairs {args.dump_pairs} "
              f"--seed {args.seed} --rank {recipe.rank} --targets {recipe.targets} --lr {recipe.lr} --batch {recipe.batch} "
              f"--epochs {recipe.epochs} --max-length {recipe.max_length} --warmup {recipe.warmup} ...", flush=True)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.adapter:  # fitted elsewhere (fit.py on a GPU): measure it here
        done = json.loads((Path(args.adapter) / "fit.json").read_text(encoding="utf-8"))
        if Path(args.adapter).resolve() != out.resolve():
            for name in ("adapter_config.json", "adapter_model.safetensors"):
                shutil.copyfile(Path(args.adapter) / name, out / name)
    else:
        from crag_lab.embeddings import model_dir

        done = fitting.fit([p.question for p in pairs], [p.text for p in pairs], [p.label for p in pairs],
                           base=model_dir(), out=out, work=args.work, seed=args.seed, rank=recipe.rank,
                           targets=recipe.targets, lr=recipe.lr, batch=recipe.batch, epochs=recipe.epochs,
                           max_length=recipe.max_length, warmup=recipe.warmup,
                           checkpoint_every=args.checkpoint_every,
                           init=(args.init or SCORER_DIR) if recipe.continues else None)
    scorer = AnswerScorer.from_adapter(out, ScorerCard(recipe.max_length, 0.5, {}))
    started = time.time()
    report = evaluate(scorer.predict, data.val)
    best = report.pop("_best")
    threshold = abstention_threshold(best["answerable"], best["unanswerable"])
    abstains = float(np.mean([s < threshold for s in best["unanswerable"]])) if best["unanswerable"] else None
    card: dict[str, Any] = {
        "max_length": recipe.max_length, "abstain_below": round(threshold, 4),
        "trained": {
            **done, "recipe": args.recipe, "questions": recipe.questions, "pairs": len(pairs),
            "sources": dict(Counter(p.source for p in pairs)),
            "validation": report, "abstention_on_unanswerable_groups": abstains,
            "documentation": [list(d) for d in data.docs], "held_out_documents": data.held_docs,
            "validation_minutes": round((time.time() - started) / 60, 1),
        },
    }
    if recipe.continues:  # what the adapter it went on from was trained on, and how it reads the same pairs
        init = Path(args.init or SCORER_DIR)
        card["trained"]["continued_from"] = json.loads((init / "scorer.json").read_text(encoding="utf-8"))
        before = evaluate(AnswerScorer.from_adapter(init, ScorerCard(recipe.max_length, 0.5, {})).predict, data.val)
        before.pop("_best")
        card["trained"]["validation_before"] = before
    (out / "scorer.json").write_text(json.dumps(card, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in card["trained"].items() if k not in ("documentation",)}, indent=1))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crag_lab.learned.train", description=__doc__)
    parser.add_argument("--train-dir", required=True,
                        help="folder with squad11_train.jsonl.gz and squad2_train_excerpt.jsonl.gz (see the data card)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="cpu")
    parser.add_argument("--site", action="append", default=[],
                        help="another site-packages folder whose READMEs to read (repeatable)")
    parser.add_argument("--wtq", help="a clone of github.com/ppasupat/WikiTableQuestions (the tables recipe reads it)")
    parser.add_argument("--written", help="a clone or git directory of github.com/haichao592/UnAnsQ (read by --recipe written)")
    parser.add_argument("--engdocs", help="the folder python -m crag_lab.learned.engdocs exported its documents to "
                        "(read by --recipe engdocs)")
    parser.add_argument("--dump-pairs", help="write the training pairs to this file for fit.py and stop")
    parser.add_argument("--adapter", help="a folder fit.py wrote: measure it and write the card instead of training")
    parser.add_argument("--out", default=str(SCORER_DIR))
    parser.add_argument("--init", help="the adapter a continuing recipe (contrast) starts from (default: the one that ships)")
    parser.add_argument("--work", default=".cache/scorer-train", help="checkpoints; rerun to resume")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    train(parser.parse_args(argv))


if __name__ == "__main__":
    main()
