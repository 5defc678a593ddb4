"""Build the scorer's training set and train its LoRA adapter: ``python -m crag_lab.learned.train``.

Seeded and resumable: the pairs are drawn with ``--seed``, the batches in a seeded order, and a
checkpoint (adapter, optimiser, step) is written every ``--checkpoint-every`` steps to ``--work``;
running the same command again continues from the last one. The finished adapter, head, ``scorer.json``
and the measured numbers go to ``--out`` (default: the folder that ships, ``crag_lab/_data/scorer``).

Sources (``--train-dir`` is the folder with ``squad11_train.jsonl.gz`` and
``squad2_train_excerpt.jsonl.gz``; the documentation is the markdown README of every permissively
licensed distribution installed beside crag_lab, crag_lab itself excluded) are described in the data
card. Nothing here reads an evaluation set or the bundled knowledge base.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata
import json
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from crag_lab.learned.data import Pair, cross_doc_pairs, doc_pairs, other_article_pairs, squad_pairs
from crag_lab.learned.scorer import SCORER_DIR, base_model

PERMISSIVE = ("MIT", "BSD", "Apache", "ISC", "PSF", "Python Software Foundation", "Unlicense", "0BSD", "Zlib")
EXCLUDED_DISTRIBUTIONS = frozenset({"crag-lab"})  # its README describes the bundled knowledge base


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _licence(meta: Any) -> str:
    text = meta.get("License-Expression") or ""
    if not text:
        classifiers = [c.rsplit("::", 1)[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
        first_line = (meta.get("License") or "").splitlines()[:1]
        text = " / ".join(classifiers) or (first_line[0] if first_line else "")
    return str(text)


def documentation() -> list[tuple[str, str, str, str]]:
    """(name, version, licence, markdown) of every installed distribution with a permissive licence
    and a markdown description of 500 characters or more, sorted by name (one entry per name)."""
    seen: dict[str, tuple[str, str, str, str]] = {}
    for dist in importlib.metadata.distributions():
        meta: Any = dist.metadata  # an email.message.Message underneath: get, get_all, get_payload
        name = str(meta["Name"]).lower()
        body = meta.get_payload() or meta.get("Description") or ""
        licence = _licence(meta)
        if (name in EXCLUDED_DISTRIBUTIONS or "markdown" not in (meta.get("Description-Content-Type") or "")
                or len(body) < 500 or not any(p.lower() in licence.lower() for p in PERMISSIVE)):
            continue
        seen.setdefault(name, (name, str(meta["Version"]), licence, str(body)))
    return [seen[k] for k in sorted(seen)]


@dataclass(frozen=True)
class TrainingSet:
    """The pairs to train and validate on, the documentation read (name, version, licence) and
    the documents held out for validation."""

    train: list[Pair]
    val: list[Pair]
    docs: list[tuple[str, str, str]]
    held_docs: list[str]


def build(train_dir: Path, *, questions: int, seed: int, docs_repeat: int = 3) -> TrainingSet:
    """The training and validation pairs. Validation holds out whole SQuAD articles and whole documents."""
    rng = random.Random(seed)
    squad = _read_jsonl(train_dir / "squad11_train.jsonl.gz")
    titles = sorted({r["title"] for r in squad})
    rng.shuffle(titles)
    held_titles = set(titles[: len(titles) // 20])
    train_rows = [r for r in squad if r["title"] not in held_titles]
    val_rows = [r for r in squad if r["title"] in held_titles]
    train_rows = rng.sample(train_rows, min(questions, len(train_rows)))
    val_rows = rng.sample(val_rows, min(max(questions // 10, 200), len(val_rows)))
    excerpt = [r for r in _read_jsonl(train_dir / "squad2_train_excerpt.jsonl.gz") if r["is_impossible"]]
    ex_titles = sorted({r["title"] for r in excerpt})
    docs = documentation()
    doc_sets = [doc_pairs(name, body, seed=seed) for name, _, _, body in docs]
    held_docs = {i for i in range(len(docs)) if int(hashlib.sha256(docs[i][0].encode()).hexdigest(), 16) % 5 == 0}
    train_docs = [d for i, d in enumerate(doc_sets) if i not in held_docs]
    val_docs = [d for i, d in enumerate(doc_sets) if i in held_docs]
    train = (squad_pairs(train_rows, seed=seed) + other_article_pairs(train_rows, share=0.25, seed=seed)
             + squad_pairs([r for r in excerpt if r["title"] == ex_titles[0]], seed=seed)
             + [p for d in train_docs for p in d] * docs_repeat + cross_doc_pairs(train_docs, seed=seed) * docs_repeat)
    val = (squad_pairs(val_rows, seed=seed + 1) + other_article_pairs(val_rows, share=0.25, seed=seed + 1)
           + squad_pairs([r for r in excerpt if r["title"] != ex_titles[0]], seed=seed + 1)
           + [p for d in val_docs for p in d] + cross_doc_pairs(val_docs, seed=seed + 1))
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
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    data = build(Path(args.train_dir), questions=args.questions, seed=args.seed)
    pairs = data.train
    print(f"training pairs: {len(pairs)} {dict(Counter(p.source for p in pairs))}; validation {len(data.val)}", flush=True)
    order = list(range(len(pairs)))
    random.Random(args.seed).shuffle(order)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model, tokenizer = base_model()
    state_file = work / "state.pt"
    if state_file.exists():
        model = PeftModel.from_pretrained(model, str(work / "adapter"), is_trainable=True)
    else:
        model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.1,
                                                 target_modules=["query", "key", "value"],
                                                 modules_to_save=["classifier", "pooler"], task_type="SEQ_CLS"))
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    steps = (len(order) + args.batch - 1) // args.batch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / 50) * max(0.0, 1 - s / steps))
    step = 0
    if state_file.exists():
        saved = torch.load(state_file, weights_only=False)
        optimiser.load_state_dict(saved["optimiser"])
        schedule.load_state_dict(saved["schedule"])
        step = int(saved["step"])
        torch.set_rng_state(saved["rng"])
        print(f"resuming at step {step} of {steps}", flush=True)
    model.train()
    started = time.time()
    while step < steps:
        batch = [pairs[i] for i in order[step * args.batch:(step + 1) * args.batch]]
        enc = tokenizer([p.question for p in batch], [p.text for p in batch], truncation="only_second",
                        max_length=args.max_length, padding=True, return_tensors="pt")
        logits = model(**enc).logits.reshape(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor([float(p.label) for p in batch]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        step += 1
        if step % 20 == 0:
            print(f"step {step}/{steps} loss {loss.item():.4f} {(time.time() - started) / 60:.1f} min", flush=True)
        if step % args.checkpoint_every == 0 or step == steps:
            model.save_pretrained(str(work / "adapter"))
            torch.save({"optimiser": optimiser.state_dict(), "schedule": schedule.state_dict(), "step": step,
                        "rng": torch.get_rng_state()}, state_file)
    model.eval()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))

    def predict(batch_pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        from crag_lab.learned.scorer import AnswerScorer, ScorerCard

        return AnswerScorer(model, tokenizer, ScorerCard(args.max_length, 0.5, {})).predict(batch_pairs)

    report = evaluate(predict, data.val)
    best = report.pop("_best")
    threshold = abstention_threshold(best["answerable"], best["unanswerable"])
    abstains = float(np.mean([s < threshold for s in best["unanswerable"]])) if best["unanswerable"] else None
    card = {
        "max_length": args.max_length, "abstain_below": round(threshold, 4),
        "trained": {
            "seed": args.seed, "questions": args.questions, "rank": args.rank, "lr": args.lr, "batch": args.batch,
            "steps": steps, "pairs": len(pairs), "sources": dict(Counter(p.source for p in pairs)),
            "validation": report, "abstention_on_unanswerable_groups": abstains,
            "documentation": [list(d) for d in data.docs], "held_out_documents": data.held_docs,
            "minutes": round((time.time() - started) / 60, 1),
        },
    }
    (out / "scorer.json").write_text(json.dumps(card, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in card["trained"].items() if k not in ("documentation",)}, indent=1))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crag_lab.learned.train", description=__doc__)
    parser.add_argument("--train-dir", required=True,
                        help="folder with squad11_train.jsonl.gz and squad2_train_excerpt.jsonl.gz (see the data card)")
    parser.add_argument("--out", default=str(SCORER_DIR))
    parser.add_argument("--work", default=".cache/scorer-train", help="checkpoints; rerun to resume")
    parser.add_argument("--questions", type=int, default=6000, help="SQuAD v1.1 train questions drawn")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    train(parser.parse_args(argv))


if __name__ == "__main__":
    main()
