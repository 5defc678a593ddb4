"""Fit the offline grader (crag_lab/offline/grader.py) on HotpotQA distractor paragraphs.

Builds (query, passage, title, label) pairs from each query's own ten ``context_doc_ids`` (label 1
for ``gold_doc_ids`` / qrels), extracts features with the runtime code, fits a sign-constrained
logistic regression, reports 5-fold GroupKFold (by query) AUROC and calibration, writes
``crag_lab/_data/grader_calibration.json``, then evaluates the written grader on SQuAD 2.0.

    .venv/bin/python bench/fit_grader.py            # fit, evaluate, write the JSON
    .venv/bin/python bench/fit_grader.py --explore  # also print the ablation table of the write-up

Embeddings are cached under ``.cache/grader/`` (git-ignored) so that re-runs take seconds; the
first run embeds about 15,000 passages, titles and sentences (about 20 minutes on 2 CPU cores).
Needs scikit-learn and scipy (dev dependencies); the runtime grader needs neither.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crag_lab.offline.grader import CalibratedGrader, GraderFeatures, describe_feature, split_sentences  # noqa: E402

HOTPOT = "hotpotqa_distractor_dev250"
SQUAD = "squad2_dev250"

# The shipped models. "untitled" serves items without a title, so it uses no title feature.
UNTITLED = (
    "cos_text",
    "cos_relation",
    "query_coverage>0.4",
    "bigram_coverage>0.25",
    "number_match",
    "log_length",
)
TITLED = (*UNTITLED, "title_exact")
# Features whose coefficient may take either sign; every other one is constrained to be >= 0.
FREE_SIGN = frozenset({"log_length"})
C = 1.0
FOLDS = 5
CLIP = (1.0, 99.0)  # training percentiles the FREE_SIGN features are clipped to (others: min..max)

# The ablations of docs/dev/grader_calibration.md: (label, features, sign-constrained, C).
LINEAR10 = (
    "cos_text",
    "cos_title",
    "cos_best_sentence",
    "query_coverage",
    "bigram_coverage",
    "entity_coverage",
    "number_match",
    "title_in_query",
    "title_exact",
    "log_length",
)
TRIALS: list[tuple[str, tuple[str, ...], bool, float]] = [
    ("cos_text only", ("cos_text",), True, C),
    ("cosines (text, title, best sentence)", ("cos_text", "cos_title", "cos_best_sentence"), True, C),
    ("lexical only, no embeddings", tuple(f for f in LINEAR10 if not f.startswith("cos_")), True, C),
    ("10 linear features of the brief, unconstrained", LINEAR10, False, C),
    ("10 linear features of the brief, constrained", LINEAR10, True, C),
    ("  + cos_relation", (*LINEAR10, "cos_relation"), True, C),
    ("untitled (shipped)", UNTITLED, True, C),
    ("titled (shipped)", TITLED, True, C),
    *[(f"titled without {f}", tuple(g for g in TITLED if g != f), True, C) for f in TITLED],
    (
        "titled, hinges replaced by linear coverage",
        (*UNTITLED[:2], "query_coverage", "bigram_coverage", *TITLED[4:]),
        True,
        C,
    ),
    ("untitled + cos_best_sentence", (*UNTITLED, "cos_best_sentence"), True, C),
    ("titled + cos_best_sentence", (*TITLED, "cos_best_sentence"), True, C),
    ("titled + cos_title", (*TITLED, "cos_title"), True, C),
    ("titled + title_in_query", (*TITLED, "title_in_query"), True, C),
    ("titled + entity_coverage", (*TITLED, "entity_coverage"), True, C),
    ("titled + query_coverage (linear too)", (*TITLED, "query_coverage"), True, C),
    ("titled, C=0.1", TITLED, True, 0.1),
    ("titled, C=10", TITLED, True, 10.0),
    ("titled, unconstrained", TITLED, False, C),
    ("untitled, unconstrained", UNTITLED, False, C),
    (
        "untitled + query_coverage^2, unconstrained",
        (*UNTITLED, "query_coverage", "query_coverage*query_coverage"),
        False,
        C,
    ),
    (
        "titled + query_coverage^2, unconstrained",
        (*TITLED, "query_coverage", "query_coverage*query_coverage"),
        False,
        C,
    ),
    (
        "untitled + query_coverage*bigram_coverage, unconstrained",
        (*UNTITLED, "query_coverage*bigram_coverage"),
        False,
        C,
    ),
    ("titled + query_coverage*bigram_coverage, unconstrained", (*TITLED, "query_coverage*bigram_coverage"), False, C),
]
TITLE_FEATURES = ("cos_title", "title_in_query", "title_exact")


# ----------------------------------------------------------------------------- data


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def read_qrels(path: Path) -> dict[str, set[str]]:
    gold: dict[str, set[str]] = {}
    with path.open(encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            qid, did, rel = line.rstrip("\n").split("\t")
            if int(rel) > 0:
                gold.setdefault(qid, set()).add(did)
    return gold


class CachedEmbedder:
    """MiniLM embeddings keyed by a hash of the text, persisted as one ``.npz`` file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._model: Any = None
        self.vecs: dict[str, np.ndarray] = {}
        self.dirty = False
        if path.exists():
            data = np.load(path)
            self.vecs = dict(zip(data["keys"].tolist(), data["vecs"], strict=True))

    @staticmethod
    def _key(kind: str, text: str) -> str:
        return kind + hashlib.sha1(text.encode("utf-8")).hexdigest()

    @property
    def model(self) -> Any:
        if self._model is None:
            from crag_lab.embeddings import default_embed_model

            self._model = default_embed_model()
        return self._model

    def texts(self, texts: list[str]) -> np.ndarray:
        keys = [self._key("t", t) for t in texts]
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in self.vecs))
        if missing:
            for text, vec in zip(missing, self.model.get_text_embedding_batch(missing), strict=True):
                self.vecs[self._key("t", text)] = np.asarray(vec, dtype=np.float32)
            self.dirty = True
        return np.stack([self.vecs[k] for k in keys])

    def query(self, query: str) -> np.ndarray:
        key = self._key("q", query)
        if key not in self.vecs:
            self.vecs[key] = np.asarray(self.model.get_query_embedding(query), dtype=np.float32)
            self.dirty = True
        return self.vecs[key]

    def warm(self, texts: Sequence[str], chunk: int = 512) -> None:
        """Embed uncached texts in large batches (much faster than query by query)."""
        todo = list(dict.fromkeys(t for t in texts if t and self._key("t", t) not in self.vecs))
        for start in range(0, len(todo), chunk):
            self.texts(todo[start : start + chunk])
            print(f"  embedded {min(start + chunk, len(todo))}/{len(todo)}", flush=True)
        self.save()

    def save(self) -> None:
        if not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.vecs)
        np.savez(self.path, keys=np.array(keys), vecs=np.stack([self.vecs[k] for k in keys]))
        self.dirty = False


def warm_texts(groups: list[dict[str, Any]]) -> list[str]:
    """Everything the extractor will embed: passages, titles, sentences of multi-sentence passages."""
    out = [t for g in groups for t in (*g["texts"], *(x for x in g["titles"] if x))]
    for g in groups:
        for text in g["texts"]:
            sents = split_sentences(text)
            out.extend(sents if len(sents) > 1 else [])
    return out


def hotpot_groups(folder: Path) -> list[dict[str, Any]]:
    """One entry per query: its ten context passages with titles and 0/1 labels."""
    docs = {d["id"]: d for d in read_jsonl(folder / "corpus.jsonl")}
    qrels = read_qrels(folder / "qrels.tsv")
    out = []
    for q in read_jsonl(folder / "queries.jsonl"):
        gold = set(q.get("gold_doc_ids") or []) | qrels.get(q["id"], set())
        ids = q["context_doc_ids"]
        out.append(
            {
                "query": q["question"],
                "texts": [docs[i]["text"] for i in ids],
                "titles": [docs[i]["title"] or None for i in ids],
                "labels": [int(i in gold) for i in ids],
            }
        )
    return out


def squad_groups(folder: Path, emb: CachedEmbedder, k: int = 10) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Answerable queries: the gold passage plus the k-1 other corpus passages nearest by cosine.

    Unanswerable queries: their paired (adversarial, answer-free) passage alone, label 0.
    """
    docs = read_jsonl(folder / "corpus.jsonl")
    qrels = read_qrels(folder / "qrels.tsv")
    emb.warm(warm_texts([{"texts": [d["text"] for d in docs], "titles": []}]))
    mat = emb.texts([d["text"] for d in docs]).astype(np.float64)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    by_id = {d["id"]: i for i, d in enumerate(docs)}
    answerable: list[dict[str, Any]] = []
    unanswerable: list[dict[str, Any]] = []
    for q in read_jsonl(folder / "queries.jsonl"):
        if q.get("answerable"):
            gold = qrels.get(q["id"]) or {q["paired_doc_id"]}
            qv = emb.query(q["question"]).astype(np.float64)
            order = np.argsort(-(mat @ (qv / np.linalg.norm(qv))), kind="stable")
            others = [int(i) for i in order if docs[int(i)]["id"] not in gold][: k - len(gold)]
            idx = [by_id[g] for g in sorted(gold)] + others
            labels = [1] * len(gold) + [0] * len(others)
        else:
            idx, labels = [by_id[q["paired_doc_id"]]], [0]
        group = {
            "query": q["question"],
            "texts": [docs[i]["text"] for i in idx],
            "titles": [docs[i]["title"] or None for i in idx],
            "labels": labels,
        }
        (answerable if q.get("answerable") else unanswerable).append(group)
    emb.save()
    return answerable, unanswerable


def extract(
    groups: list[dict[str, Any]], names: Sequence[str], emb: CachedEmbedder
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features (runtime code, cached embeddings), labels and query ids of all pairs."""
    fx = GraderFeatures(names)
    xs, ys, gs = [], [], []
    for g, grp in enumerate(groups):
        xs.append(fx.extract(grp["query"], grp["texts"], grp["titles"], emb.texts, emb.query))
        ys.extend(grp["labels"])
        gs.extend([g] * len(grp["texts"]))
    emb.save()
    return np.vstack(xs), np.asarray(ys, dtype=np.float64), np.asarray(gs)


def columns(x: np.ndarray, all_names: Sequence[str], names: Sequence[str]) -> np.ndarray:
    return x[:, [list(all_names).index(n) for n in names]]


# ----------------------------------------------------------------------------- metrics


def _bins(p: np.ndarray, bins: int) -> np.ndarray:
    return np.clip((p * bins).astype(int), 0, bins - 1)


def ece(y: np.ndarray, p: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error over ten equal-width probability bins."""
    idx = _bins(p, bins)
    return float(
        sum(abs(p[idx == b].mean() - y[idx == b].mean()) * (idx == b).sum() for b in set(idx.tolist())) / len(y)
    )


def reliability(y: np.ndarray, p: np.ndarray, bins: int = 10) -> list[str]:
    idx = _bins(p, bins)
    return [
        f"{b / bins:.1f}-{(b + 1) / bins:.1f}  n={int((idx == b).sum()):<5d} "
        f"predicted {p[idx == b].mean():.3f}  observed {y[idx == b].mean():.3f}"
        for b in sorted(set(idx.tolist()))
    ]


def auroc(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p))


def distribution(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    gold, other = p[y == 1], p[y == 0]
    return {
        "mean_gold": round(float(gold.mean()), 3),
        "mean_distractor": round(float(other.mean()), 3),
        "gold_ge_0.7": round(float((gold >= 0.7).mean()), 3),
        "gold_ge_0.3": round(float((gold >= 0.3).mean()), 3),
        "distractor_lt_0.3": round(float((other < 0.3).mean()), 3),
        "distractor_ge_0.7": round(float((other >= 0.7).mean()), 3),
    }


# ----------------------------------------------------------------------------- fitting


def fit_lr(
    x: np.ndarray, y: np.ndarray, features: Sequence[str], c: float = C, constrained: bool = True
) -> dict[str, Any]:
    """Clip, standardise, then L2-penalised logistic regression (scikit-learn's objective).

    Features are clipped (here and at prediction time) to the range seen in training, and the
    free-sign ones (``log_length``) to their 1st..99th percentile (``CLIP``): a two-word passage
    must not extrapolate into a large "short passage" bonus.

    With ``constrained``, every coefficient but those of ``FREE_SIGN`` is kept >= 0: more
    similarity or overlap never lowers a score. Unconstrained fits learn HotpotQA's
    distractor-selection artefact (passages sharing no word with the question are more often
    gold), which fails on other data (see docs/dev/grader_calibration.md).
    """
    from scipy.optimize import minimize

    free = np.array([any(part in FREE_SIGN for part in f.replace(">", "*").split("*")) for f in features])
    low = np.where(free, np.percentile(x, CLIP[0], axis=0), x.min(axis=0))
    high = np.where(free, np.percentile(x, CLIP[1], axis=0), x.max(axis=0))
    x = np.clip(x, low, high)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        t = z @ w[:-1] + w[-1]
        p = 1.0 / (1.0 + np.exp(-t))
        value = c * float(np.sum(np.logaddexp(0.0, t) - y * t)) + 0.5 * float(w[:-1] @ w[:-1])
        grad = np.concatenate([c * (z.T @ (p - y)) + w[:-1], [c * float(np.sum(p - y))]])
        return value, grad

    bounds = [(None, None) if is_free or not constrained else (0.0, None) for is_free in free] + [(None, None)]
    res = minimize(
        loss, np.zeros(len(features) + 1), jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 5000}
    )
    if not res.success:
        raise RuntimeError(f"logistic fit did not converge: {res.message}")
    return {"low": low, "high": high, "mean": mean, "scale": scale, "coef": res.x[:-1], "intercept": float(res.x[-1])}


def predict(model: dict[str, Any], x: np.ndarray) -> np.ndarray:
    x = np.clip(x, model["low"], model["high"])
    z = ((x - model["mean"]) / model["scale"]) @ model["coef"] + model["intercept"]
    return np.asarray(1.0 / (1.0 + np.exp(-z)))


def fit_isotonic(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p, y)
    return np.asarray(iso.X_thresholds_), np.asarray(iso.y_thresholds_)


def cross_validate(
    x: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    features: Sequence[str],
    c: float = C,
    constrained: bool = True,
    isotonic: bool = False,
) -> dict[str, Any]:
    """Out-of-fold probabilities and per-fold AUROC; with ``isotonic``, a nested isotonic map too."""
    from sklearn.model_selection import GroupKFold

    oof, oof_iso, fold_auc = np.zeros(len(y)), np.zeros(len(y)), []
    for train, test in GroupKFold(n_splits=FOLDS).split(x, y, groups):
        oof[test] = predict(fit_lr(x[train], y[train], features, c, constrained), x[test])
        fold_auc.append(auroc(y[test], oof[test]))
        if isotonic:
            inner = np.zeros(len(train))
            for itr, ite in GroupKFold(n_splits=FOLDS).split(x[train], y[train], groups[train]):
                model = fit_lr(x[train][itr], y[train][itr], features, c, constrained)
                inner[ite] = predict(model, x[train][ite])
            bx, by = fit_isotonic(inner, y[train])
            oof_iso[test] = np.interp(oof[test], bx, by)
    out: dict[str, Any] = {
        "oof": oof,
        "auroc_folds": fold_auc,
        "auroc_mean": float(np.mean(fold_auc)),
        "auroc_sd": float(np.std(fold_auc)),
        "auroc_pooled": auroc(y, oof),
        "ece": ece(y, oof),
    }
    if isotonic:
        out.update(oof_iso=oof_iso, ece_iso=ece(y, oof_iso), auroc_iso=auroc(y, oof_iso))
    return out


# ----------------------------------------------------------------------------- reporting


def explore(
    hot: tuple[np.ndarray, np.ndarray, np.ndarray], squad: tuple[np.ndarray, np.ndarray] | None, names: Sequence[str]
) -> None:
    """Print the ablation table: HotpotQA CV, and SQuAD 2.0 for title-free feature sets."""
    x, y, gid = hot
    print(f"\nAblations ({FOLDS}-fold GroupKFold on HotpotQA; SQuAD: fitted on all HotpotQA, title-free sets only)")
    print(f"  {'features':<58} {'AUROC':>13}  {'ECE':>5}  {'SQuAD AUROC':>11}  {'ECE':>5}")
    for label, feats, constrained, c in TRIALS:
        xf = columns(x, names, feats)
        res = cross_validate(xf, y, gid, feats, c, constrained)
        line = f"  {label:<58} {res['auroc_mean']:.3f} ± {res['auroc_sd']:.3f}  {res['ece']:.3f}"
        if squad is not None and not any(p in TITLE_FEATURES for f in feats for p in f.replace(">", "*").split("*")):
            p = predict(fit_lr(xf, y, feats, c, constrained), columns(squad[0], names, feats))
            line += f"  {auroc(squad[1], p):>11.3f}  {ece(squad[1], p):.3f}"
        print(line, flush=True)


def model_json(model: dict[str, Any], features: Sequence[str]) -> dict[str, Any]:
    return {
        "features": list(features),
        "descriptions": [describe_feature(f) for f in features],
        "low": [round(float(v), 6) for v in model["low"]],
        "high": [round(float(v), 6) for v in model["high"]],
        "mean": [round(float(v), 6) for v in model["mean"]],
        "scale": [round(float(v), 6) for v in model["scale"]],
        "coef": [round(float(v), 6) for v in model["coef"]],
        "intercept": round(float(model["intercept"]), 6),
    }


def cv_json(cv: dict[str, Any]) -> dict[str, Any]:
    return {
        "auroc_mean": round(cv["auroc_mean"], 4),
        "auroc_sd": round(cv["auroc_sd"], 4),
        "auroc_folds": [round(v, 4) for v in cv["auroc_folds"]],
        "ece_logistic": round(cv["ece"], 4),
        "ece_after_nested_isotonic": round(cv["ece_iso"], 4),
    }


def timing(params: dict[str, Any], groups: list[dict[str, Any]], n: int = 20) -> float:
    """Median seconds of one ``score()`` call for 5 titled passages, with the real embedder."""
    grader = CalibratedGrader(params=params)
    grader.score(groups[0]["query"], groups[0]["texts"][:5], groups[0]["titles"][:5])
    times = []
    for grp in groups[1 : n + 1]:
        t0 = time.perf_counter()
        grader.score(grp["query"], grp["texts"][:5], grp["titles"][:5])
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=Path, default=ROOT.parent / "shared" / "datasets")
    parser.add_argument("--out", type=Path, default=ROOT / "crag_lab" / "_data" / "grader_calibration.json")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "grader")
    parser.add_argument("--explore", action="store_true", help="print the ablation table")
    parser.add_argument("--isotonic", action="store_true", help="ship an isotonic map after each regression")
    parser.add_argument("--no-write", action="store_true", help="report only; leave the JSON alone")
    parser.add_argument("--no-timing", action="store_true", help="skip timing score() with the real embedder")
    args = parser.parse_args(argv)

    hotpot_dir = args.datasets / HOTPOT
    if not (hotpot_dir / "queries.jsonl").exists():
        print(f"fit_grader: {hotpot_dir} not found; nothing to fit (pass --datasets DIR). Skipping.")
        return 0

    emb = CachedEmbedder(args.cache_dir / "minilm.npz")
    groups = hotpot_groups(hotpot_dir)
    names = list(dict.fromkeys([*TITLED, *UNTITLED, *(f for t in TRIALS for f in t[1])] if args.explore else TITLED))
    print(f"HotpotQA: {len(groups)} queries, {sum(len(g['texts']) for g in groups)} passages; embedding (cached) ...")
    emb.warm(warm_texts(groups))
    x, y, gid = extract(groups, names, emb)
    print(f"  gold {int(y.sum())} / {len(y)} (base rate {y.mean():.3f})")

    squad_dir = args.datasets / SQUAD
    have_squad = (squad_dir / "queries.jsonl").exists()
    if have_squad:
        ans, unans = squad_groups(squad_dir, emb)
    if args.explore:
        explore((x, y, gid), extract(ans, names, emb)[:2] if have_squad else None, names)

    xt, xu = columns(x, names, TITLED), columns(x, names, UNTITLED)
    cv_t = cross_validate(xt, y, gid, TITLED, isotonic=True)
    cv_u = cross_validate(xu, y, gid, UNTITLED, isotonic=True)
    cos = columns(x, names, ["cos_text"])[:, 0]
    cv_cos = cross_validate(cos[:, None], y, gid, ["cos_text"])
    ece_raw = ece(y, np.clip(cos, 0.0, 1.0))
    print(f"\nHotpotQA, {FOLDS}-fold GroupKFold by query")
    print(f"  raw cosine                AUROC {auroc(y, cos):.3f}         ECE (cosine as a probability) {ece_raw:.3f}")
    print(
        f"  logistic on cosine only   AUROC {cv_cos['auroc_mean']:.3f} ± {cv_cos['auroc_sd']:.3f}"
        f" ECE {cv_cos['ece']:.3f}"
    )
    for label, cv in (("titled", cv_t), ("untitled", cv_u)):
        print(
            f"  {label:<9} model           AUROC {cv['auroc_mean']:.3f} ± {cv['auroc_sd']:.3f} "
            f"(pooled {cv['auroc_pooled']:.3f})  ECE {cv['ece']:.3f}; after nested isotonic {cv['ece_iso']:.3f}"
        )
    print("  reliability of the titled model, out of fold:")
    print("\n".join(f"    {row}" for row in reliability(y, cv_t["oof"])))
    dist = {"titled": distribution(y, cv_t["oof"]), "untitled": distribution(y, cv_u["oof"])}
    print(f"  out-of-fold score distribution, titled: {dist['titled']}")
    print(f"  out-of-fold score distribution, untitled: {dist['untitled']}")

    models = {"titled": fit_lr(xt, y, TITLED), "untitled": fit_lr(xu, y, UNTITLED)}
    params: dict[str, Any] = {
        "description": (
            "Offline relevance grader: sign-constrained logistic regression on hand-made features, "
            "fitted on HotpotQA distractor paragraphs (each query's 2 gold vs its 8 distractors). "
            "Probabilities are calibrated for that mix, about 1 relevant passage in 5. "
            "'titled' scores items with a title, 'untitled' the others. Features are clipped "
            "to [low, high], then standardised with 'mean' and 'scale' before the coefficients apply. "
            "Written by bench/fit_grader.py."
        ),
        "models": {
            "titled": model_json(models["titled"], TITLED),
            "untitled": model_json(models["untitled"], UNTITLED),
        },
    }
    if args.isotonic:
        for key, cv in (("titled", cv_t), ("untitled", cv_u)):
            bx, by = fit_isotonic(cv["oof"], y)
            params["models"][key]["calibration"] = {
                "x": [round(float(v), 6) for v in bx],
                "y": [round(float(v), 6) for v in by],
            }

    squad: dict[str, Any] = {}
    if have_squad:
        grader = CalibratedGrader(embed_model=None, params=params)
        xs, ys, _ = extract(ans, grader.extractor.names, emb)
        ps = grader.probabilities(xs)
        pn = grader.probabilities(extract(unans, grader.extractor.names, emb)[0])
        squad = {
            "dataset": SQUAD,
            "protocol": (
                "answerable queries: the gold passage vs the 9 other corpus passages nearest by MiniLM "
                "cosine; SQuAD has no titles, so the untitled model scores every item"
            ),
            "n_queries": len(ans),
            "n_passages": len(ys),
            "auroc": round(auroc(ys, ps), 4),
            "auroc_raw_cosine": round(auroc(ys, xs[:, grader.extractor.names.index("cos_text")]), 4),
            "ece": round(ece(ys, ps), 4),
            "distribution": distribution(ys, ps),
            "unanswerable_paired_passage": {
                "n": len(pn),
                "mean": round(float(pn.mean()), 3),
                "ge_0.7": round(float((pn >= 0.7).mean()), 3),
                "ge_0.3": round(float((pn >= 0.3).mean()), 3),
            },
        }
        print(f"\nSQuAD 2.0 ({squad['protocol']})")
        print(
            f"  {len(ans)} queries, {len(ys)} passages: AUROC {squad['auroc']:.3f} "
            f"(raw cosine {squad['auroc_raw_cosine']:.3f}), ECE {squad['ece']:.3f}"
        )
        print("\n".join(f"    {row}" for row in reliability(ys, ps)))
        print(f"  distribution: {squad['distribution']}")
        print(f"  unanswerable queries, their paired answer-free passage: {squad['unanswerable_paired_passage']}")
    else:
        print(f"\n{squad_dir} not found; skipping the SQuAD 2.0 evaluation.")

    params["metadata"] = {
        "dataset": HOTPOT,
        "pairs": "each query's own 10 context_doc_ids with their titles; label 1 for gold_doc_ids / qrels",
        "n_queries": len(groups),
        "n_passages": len(y),
        "n_gold": int(y.sum()),
        "fit": (
            f"features clipped to their training range ({sorted(FREE_SIGN)} to its percentiles "
            f"{CLIP[0]:g}..{CLIP[1]:g}) and standardised; "
            f"L2 logistic regression C={C}, coefficients >= 0 except "
            f"{sorted(FREE_SIGN)}; {FOLDS}-fold GroupKFold by query for the metrics"
        ),
        "cv_titled": cv_json(cv_t),
        "cv_untitled": cv_json(cv_u),
        "raw_cosine": {"auroc": round(auroc(y, cos), 4), "ece_as_probability": round(ece_raw, 4)},
        "logistic_on_cosine_only": {"auroc_mean": round(cv_cos["auroc_mean"], 4), "ece": round(cv_cos["ece"], 4)},
        "score_distribution_out_of_fold": dist,
        "isotonic_shipped": bool(args.isotonic),
        "squad2": squad,
        "embed_model": "all-MiniLM-L6-v2 (bundled, normalised)",
        "date": dt.date.today().isoformat(),
        "command": "python bench/fit_grader.py" + (" --isotonic" if args.isotonic else ""),
    }
    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(params, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")
    print("\ncoefficients on standardised features (titled | untitled):")
    mt, mu = params["models"]["titled"], params["models"]["untitled"]
    for i, name in enumerate(TITLED):
        cu = f"{mu['coef'][UNTITLED.index(name)]:+.3f}" if name in UNTITLED else "   -  "
        print(f"  {name:<22} {mt['coef'][i]:+.3f} | {cu}   (mean {mt['mean'][i]:.3f}, sd {mt['scale'][i]:.3f})")
    print(f"  {'intercept':<22} {mt['intercept']:+.3f} | {mu['intercept']:+.3f}")
    emb.save()
    if not args.no_timing:
        print(f"\nscore() for 5 passages: {1000 * timing(params, groups):.0f} ms (median of 20 calls, real embedder)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
