"""A learned abstention gate fitted on training data only: does it beat the rules on held-out questions?

`bench/study_answerability.py` showed that a logistic regression over the synthesizer's features
separates SQuAD 2.0 dev's answerable questions from its unanswerable ones better than the rules
(out-of-fold AUROC 0.75 against 0.63 for support alone), but it was fitted on those questions, so it
could not ship. Here the same regression is fitted on data the project may train on, and measured on
questions it never saw:

- fitted: ``squad-held``, written unanswerable questions of SQuAD 2.0 **train** (UnAnsQ's pairs,
  `crag_lab.learned.written_unanswerable`) whose article is one of the 22 SQuAD v1.1 train articles every
  learned reader here holds out (`crag_lab.learned.train.held_out_titles`, seed 13: the answer scorer, the
  span reader and the doubt reader never trained on them), each with the answerable question it was
  written from, asked against a knowledge base of their paragraphs (as ``crag-lab eval`` asks SQuAD 2.0);
  ``docs-held``, templated questions over the READMEs the answer scorer held out, half made unanswerable by
  deleting the lines that answer them (`docs_held_set`: unanswerable questions about a real package's
  documentation, close to its facts); and ``kb``, the KB tuning split (the grader's fit uses it too; never the frozen test split);
- measured, never fitted: ``kb-test`` (the frozen test split) and ``squad2-dev`` (all 250 questions of
  SQuAD 2.0 dev, ``../shared/datasets/squad2_dev250``).

Each question is asked once through the default graph (`study_answerability.capture`) and the chosen
unit's features are `study_answerability.features`. Three fits are compared (`FITS`): all three training
domains, without the READMEs, and without the KB tuning split. The regression is fitted at even odds (each fitted
domain and class weighted equally). Its cut is set on the fitted data alone: the highest probability
below which at most ``FA_BUDGET`` of the fitted answerable questions fall, in each fitted domain. The
table sets the rules (what ships), the rules with the opt-in doubt check, and the gate at that cut
(alone and joined to the rules) side by side on every domain; the fitted columns are out of fold.

    .venv/bin/python bench/study_abstain_gate.py     # writes docs/dev/abstain_gate.md (+ .json)

Needs ../shared/train, ../shared/datasets and an UnAnsQ copy (``fetch github:haichao592/UnAnsQ``; its git
directory or a checkout via ``--unansq``); skips cleanly (exit 0) when one is absent. Needs scikit-learn.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from study_answerability import FEATURES, domain_matrix, even_odds, out_of_fold, rates, rules, write  # noqa: E402

TRAIN = ROOT.parent / "shared" / "train"
SQUAD_DEV = ROOT.parent / "shared" / "datasets" / "squad2_dev250"
UNANSQ = Path("/work/.mirror/haichao592+UnAnsQ/repo")
SITES = [str(p) for p in (ROOT / ".venv-phoenix" / "lib").glob("python3*/site-packages")]
"""Where the held-out READMEs are installed (as `bench/fit_grader.py` reads them)."""
OUT = ROOT / "docs" / "dev" / "abstain_gate.md"
SEED = 13
"""The learned readers' seed: `held_out_titles` with it names the articles none of them trained on."""
PAIRS = 300
"""Written unanswerable questions drawn (each with its answerable twin): 600 questions."""
FA_BUDGET = 0.10
"""The gate's cut keeps at most this share of each fitted domain's answerable questions below it."""
FITS = {"all": ("squad-held", "docs-held", "kb"), "no docs": ("squad-held", "kb"),
        "no kb": ("squad-held", "docs-held")}
"""The fits compared, by name: the domains each is fitted on. ``all`` is the candidate the prose quotes."""
HELD_OUT = ("kb-test", "squad2-dev")
MATRICES = ROOT / ".cache" / "abstain_gate" / "matrices.npz"
"""Every domain's features, kept so that a rerun with the same readers refits in seconds (``--refresh`` rebuilds)."""


def squad_held_set(train_dir: Path, unansq: Path, *, pairs: int, seed: int) -> Any:
    """An `EvalSet` of ``pairs`` written unanswerable questions of the held-out articles and their
    answerable twins, its passages the paragraphs they were written against."""
    import hashlib

    from crag_lab.eval.datasets import EvalQuery, EvalSet, Passage
    from crag_lab.learned.router_data import read_jsonl
    from crag_lab.learned.train import held_out_titles
    from crag_lab.learned.written_unanswerable import read_pairs

    squad = read_jsonl(train_dir / "squad11_train.jsonl.gz")
    held = held_out_titles(squad, seed)
    found = [p for p in read_pairs(unansq, squad) if p["title"] in held]
    chosen = random.Random(seed).sample(found, min(pairs, len(found)))
    passages: dict[str, Passage] = {}
    queries = []
    for p in chosen:
        pid = f"squad-{hashlib.sha1(p['context'].encode()).hexdigest()[:10]}"
        passages.setdefault(pid, Passage(pid, str(p["title"]).replace("_", " "), str(p["context"])))
        queries.append(EvalQuery(f"{p['id']}/u", str(p["question"]), (), False, "simple"))
        queries.append(EvalQuery(f"{p['id']}/a", str(p["answerable_question"]), tuple(p["answers"]), True, "simple"))
    return EvalSet("squad-held", queries, train_dir, list(passages.values()))


def docs_held_set(*, sites: Sequence[str], seed: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The rows and the knowledge-base files (name: Markdown, written as is) of templated questions
    (`crag_lab.learned.data.doc_pairs`) over the READMEs the answer scorer held out, half of them made
    unanswerable by deleting from the README every line the answering unit is made of (a line whose content
    words all belong to that unit, headings kept): the rest of the document, about the same package, stays.
    A question whose own lines another's deletion took is left out."""
    from crag_lab.learned import AnswerScorer
    from crag_lab.learned.data import doc_pairs
    from crag_lab.learned.readmes import documentation
    from crag_lab.offline.text import content_terms

    held = set(AnswerScorer.load().card.trained["held_out_documents"])
    rng = random.Random(seed)
    files: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    for name, _, _, body in documentation(sites):
        if name not in held:
            continue
        lines = body.splitlines()
        terms = [frozenset(content_terms(line)) if not line.lstrip().startswith("#") else frozenset() for line in lines]
        asked = [pair for pair in doc_pairs(name, body, seed=seed) if pair.label]
        rng.shuffle(asked)
        owned = [{i for i, t in enumerate(terms) if len(t) >= 2 and t <= set(content_terms(pair.text))} for pair in asked]
        gone: set[int] = set()
        for n, (pair, own) in enumerate(zip(asked, owned, strict=True)):
            if n % 2 == 0 and own:
                gone |= own
                rows.append({"id": f"{pair.group}/u", "question": pair.question, "answerable": False})
        rows += [{"id": f"{pair.group}/a", "question": pair.question, "answerable": True}
                 for n, (pair, own) in enumerate(zip(asked, owned, strict=True)) if n % 2 and own and not own & gone]
        files[f"{name}.md"] = "\n".join(line for i, line in enumerate(lines) if i not in gone) + "\n"
    return rows, files


def fit(x: np.ndarray, y: np.ndarray, domain: np.ndarray) -> Any:
    """The gate fitted on every fitted question, as `study_answerability.out_of_fold` fits it on each fold."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    return model.fit(x, y, logisticregression__sample_weight=even_odds(y, domain))


def cut_for(p: np.ndarray, y: np.ndarray, domain: np.ndarray, budget: float) -> float:
    """The highest cut keeping at most ``budget`` of each domain's answerable questions below it."""
    return float(min(np.quantile(p[(domain == d) & y], budget) for d in np.unique(domain)))


def summary(x: np.ndarray, y: np.ndarray, p: np.ndarray, cut: float) -> dict[str, Any]:
    from sklearn.metrics import roc_auc_score

    gate = p < cut
    return {"questions": len(y), "unanswerable": int((~y).sum()),
            "auroc_gate": round(float(roc_auc_score(y, p)), 3),
            "auroc_support": round(float(roc_auc_score(y, x[:, 0])), 3),
            "rules": rates(rules(x), y), "rules_doubt": rates(rules(x, doubt=True), y),
            "gate": rates(gate, y), "rules_or_gate": rates(rules(x) | gate, y)}


def markdown(result: Mapping[str, Any]) -> str:
    lines = ["# A learned abstention gate, fitted on training data", "",
             "Written by `bench/study_abstain_gate.py` (see its docstring for the method). A logistic regression over",
             "the synthesizer's features (" + ", ".join(f"`{f}`" for f in FEATURES) + ") fitted at even odds on",
             f"training domains only; `{'` and `'.join(HELD_OUT)}` are held out. Each fit's gate abstains below its cut,",
             f"the highest keeping at most {100 * FA_BUDGET:.0f} % of each fitted domain's answerable questions below it",
             "(fitted data only). Fitted rows are out of fold (5 folds); cells are abstention on unanswerable / false",
             "abstention on answerable questions, in %. `squad-held`: SQuAD 2.0 train's written unanswerable questions",
             "of the articles no learned reader trained on, with their answerable twins; `docs-held`: templated",
             "questions over the READMEs the answer scorer held out, half made unanswerable by deleting the lines",
             "that answer them (the templates split any `key: value` line, so some of its answerable questions are",
             "noise no reader answers, `how is { \"path\" described`: its false-abstention column measures the",
             "templates as much as the rules); `kb`: the KB tuning split.", ""]
    for name, fit_result in result["fits"].items():
        cells, fitted = fit_result["domains"], FITS[name]
        lines += [f"## Fit `{name}`: {', '.join(fitted)}; cut {fit_result['cut']:.3f}", "",
                  "| domain | questions | unanswerable | AUROC, gate | AUROC, support | rules (ships) | "
                  "rules + doubt check | gate | rules or gate |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for domain, r in cells.items():
            row = [f"{100 * r[k]['abstention']:.1f} / {100 * r[k]['false_abstention']:.1f}"
                   for k in ("rules", "rules_doubt", "gate", "rules_or_gate")]
            role = "fitted" if domain in fitted else "held out" if domain in HELD_OUT else "not fitted"
            lines.append(f"| {domain} ({role}) | {r['questions']} | {r['unanswerable']} | {r['auroc_gate']:.3f} | "
                         f"{r['auroc_support']:.3f} | " + " | ".join(row) + " |")
        verdict = [f"`{form}` " + ("ships" if ships(cells, form) else "does not ship") for form in ("gate", "rules_or_gate")]
        lines += ["", "By the held-out test below: " + "; ".join(verdict) + ".", ""]
    lines += ["Weights of the `all` fit (on standardised features):", "", "| feature | weight |", "|---|---:|"]
    lines += [f"| `{f}` | {w:+.3f} |" for f, w in result["fits"]["all"]["weights"].items()]
    test, tuning = (result["fits"]["all"]["domains"][d] for d in ("kb-test", "kb"))
    lines += ["", "A gate ships when, held out, it abstains more on the KB test split at no more false abstention than",
              "the rules, and reaches SQuAD 2.0 dev's 60 % at 20 % false abstention at most. Reading it: the KB tuning",
              f"split's unanswerable questions are easy for every feature (support alone {tuning['auroc_support']:.3f}),",
              f"the test split's are not (support alone {test['auroc_support']:.3f}); what the other domains teach the gate",
              "is read off the `kb-test` rows.", ""]
    return "\n".join(lines)


def ships(cells: Mapping[str, Any], form: str) -> bool:
    """The held-out test a gate must pass to replace the rules (see `markdown`'s reading)."""
    test, dev = cells["kb-test"], cells["squad2-dev"]
    return (test[form]["abstention"] > test["rules"]["abstention"]
            and test[form]["false_abstention"] <= test["rules"]["false_abstention"]
            and dev[form]["abstention"] >= 0.6 and dev[form]["false_abstention"] <= 0.2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unansq", type=Path, default=UNANSQ, help="UnAnsQ's git directory or a checkout")
    parser.add_argument("--pairs", type=int, default=PAIRS)
    parser.add_argument("--refresh", action="store_true", help="rebuild the kept features (after a reader changed)")
    args = parser.parse_args(argv)
    for need in (TRAIN, SQUAD_DEV, args.unansq):
        if not need.exists():
            print(f"skipping: {need} not found")
            return 0
    from crag_lab import Lab
    from crag_lab.eval import load_dataset
    from crag_lab.learned import SpanReader

    spans = SpanReader.load()
    cache = ROOT / ".cache" / "eval_kb"

    def kb_rows(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (ROOT / "data" / name).read_text(encoding="utf-8").splitlines()
                if line.strip()]

    def on(evalset: Any) -> tuple[np.ndarray, np.ndarray]:
        lab = Lab.from_directory(evalset.write_kb(cache), remote=False)
        lab.prepare()
        return domain_matrix(lab, [q.row() for q in evalset.queries], spans)

    if MATRICES.is_file() and not args.refresh:
        kept = np.load(MATRICES)
        matrices = {d: (kept[f"{d}/x"], kept[f"{d}/y"]) for d in kept["domains"]}
    else:
        kb = Lab.from_directory(ROOT / "data" / "kb", remote=False)
        docs_rows, docs_files = docs_held_set(sites=SITES, seed=SEED)
        docs_kb = cache / "docs-held"
        docs_kb.mkdir(parents=True, exist_ok=True)
        for stale in docs_kb.glob("*.md"):  # this folder is this study's own, written below
            if stale.name not in docs_files:
                stale.unlink()
        for file, text in docs_files.items():
            if not (docs_kb / file).is_file() or (docs_kb / file).read_text(encoding="utf-8") != text:
                (docs_kb / file).write_text(text, encoding="utf-8")
        docs_lab = Lab.from_directory(docs_kb, remote=False)
        docs_lab.prepare()
        matrices = {"squad-held": on(squad_held_set(TRAIN, args.unansq, pairs=args.pairs, seed=SEED)),
                    "docs-held": domain_matrix(docs_lab, docs_rows, spans),
                    "kb": domain_matrix(kb, kb_rows("kb_queries.jsonl"), spans),
                    "kb-test": domain_matrix(kb, kb_rows("kb_queries_test.jsonl"), spans),
                    "squad2-dev": on(load_dataset(SQUAD_DEV, limit=None))}
        MATRICES.parent.mkdir(parents=True, exist_ok=True)
        np.savez(MATRICES, domains=np.array(list(matrices)),
                 **{f"{d}/{k}": v for d, m in matrices.items() for k, v in zip("xy", m, strict=True)})
    result: dict[str, Any] = {"fa_budget": FA_BUDGET, "pairs": args.pairs, "fits": {}}
    for name, fitted in FITS.items():
        x = np.vstack([matrices[d][0] for d in fitted])
        y = np.concatenate([matrices[d][1] for d in fitted])
        domain = np.concatenate([[d] * len(matrices[d][1]) for d in fitted])
        oof = out_of_fold(x, y, domain)
        cut = cut_for(oof, y, domain, FA_BUDGET)
        model = fit(x, y, domain)
        weights = dict(zip(FEATURES, (round(float(w), 3) for w in model[-1].coef_[0]), strict=True))
        domains = {d: summary(xd, yd, oof[domain == d] if d in fitted else model.predict_proba(xd)[:, 1], cut)
                   for d, (xd, yd) in matrices.items()}
        result["fits"][name] = {"cut": round(cut, 4), "weights": weights, "domains": domains}
    text = markdown(result)
    write(OUT, text, result)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
