"""``crag-lab tune``: the cost–quality frontier of a recorded run, and the cross-validated pick.

    crag-lab tune runs/knowledge_base.jsonl
    crag-lab tune runs/kb.jsonl --dataset data/kb_queries.jsonl --budget 4 --folds 5
    crag-lab tune runs/big.jsonl --ray auto        # the grid replayed on a Ray cluster's workers
    crag-lab tune runs/kb.jsonl --guarantee "gold_dropped<=0.10" --delta 0.1   # a risk-controlled pick
"""

from __future__ import annotations

import argparse
from typing import Any

from crag_lab.replay.frontier import METRICS

SHOWN = ("relevance_floor", "generate_threshold", "vector_score_threshold", "calls_per_question",
         "tokens_per_question", "gold_recall", "gold_precision", "gold_f1", "needs_rerun", "answers_known",
         "answer_containment")


def add_tune_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``tune`` on the ``crag-lab`` sub-command parser (called by `crag_lab.cli`)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "tune", help="where should the thresholds be: the frontier of a recorded run and a cross-validated pick")
    p.add_argument("experiment", help="a recorded run (Experiment.save, crag-lab eval --save-runs)")
    p.add_argument("--dataset", help="the labelled .jsonl query file, matched by id, when the recording has no labels")
    p.add_argument("--budget", type=float, help="at most this many model calls per question")
    p.add_argument("--folds", type=int, default=5, help="cross-validation folds over questions (default 5)")
    p.add_argument("--metric", default="gold_f1", choices=list(METRICS), help="the quality to maximise (default gold_f1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the folds (default 0)")
    p.add_argument("--ray", nargs="?", const="ray", metavar="ADDRESS",
                   help="replay the grid's settings on Ray workers: alone, a local Ray (or RAY_ADDRESS); with an "
                        "address ('auto', 'ray://HEAD:10001', 'HEAD:6379'), that cluster")
    p.add_argument("--workers", type=int, help="Ray workers (default: every CPU of the cluster)")
    p.add_argument("--guarantee", metavar="LOSS<=VALUE",
                   help="pick with a finite-sample guarantee instead (Learn-then-Test): e.g. 'gold_dropped<=0.10', "
                        "'gold_dropped_first<=0.10', 'false_abstention<=0.15', 'calls<=3.5', several joined by commas")
    p.add_argument("--delta", type=float, default=0.1,
                   help="with --guarantee: the chance the guarantee fails over the recorded questions (default 0.1)")
    p.add_argument("--procedure", default="fixed_sequence", choices=["fixed_sequence", "bonferroni"],
                   help="with --guarantee: the family-wise error control over the grid (default fixed_sequence)")
    p.add_argument("--needs-rerun", default="worst", choices=["worst", "exclude"],
                   help="with --guarantee: a loss replay cannot know counts as the worst (default) or is left out")
    p.set_defaults(func=cmd_tune)
    return p


def _labels(exp: Any, dataset: str | None) -> dict[str, dict[str, Any]] | None:
    """None (the recording's own labels) when a record carries gold labels, else the dataset's, by id."""
    if any("gold" in (r.get("labels") or {}) for r in exp.records):
        return None
    if dataset is None:
        raise ValueError("the recording has no gold labels; give the labelled query file with --dataset")
    from crag_lab.eval.datasets import load_dataset

    return {q.id: q.row() for q in load_dataset(dataset).queries}


def cmd_tune(args: argparse.Namespace) -> int:
    import pandas as pd

    from crag_lab.replay.experiment import Experiment
    from crag_lab.replay.tune import tune

    exp = Experiment.load(args.experiment)
    labels = _labels(exp, args.dataset)
    if args.ray is None:
        if args.workers is not None:
            raise ValueError("--workers needs --ray")
        front = exp.frontier(labels=labels, metric=args.metric)
    else:
        from crag_lab.ray_executor import RayExecutor, resolve_executor

        resolve_executor(args.ray)  # an address that is not one fails now, before anything starts
        with RayExecutor(None if args.ray == "ray" else args.ray, workers=args.workers) as executor:
            front = exp.frontier(labels=labels, metric=args.metric, executor=executor)
    if args.guarantee is not None:
        return _print_guarantee(args, exp, front, labels)
    result = tune(front, folds=args.folds, budget_calls=args.budget, metric=args.metric, seed=args.seed)
    pareto = front.pareto()
    if args.budget is not None:
        pareto = pareto[pareto["calls_per_question"] <= args.budget + 1e-9]
    shown = [c for c in dict.fromkeys((*SHOWN[:5], args.metric, *SHOWN[5:])) if c in pareto]
    print(f"{args.experiment}: {len(front.ids)} questions, {len(front)} settings replayed; the Pareto set "
          f"(fewest calls per question for the most {args.metric})"
          + (f", within {args.budget:g} calls per question" if args.budget is not None else "") + ":\n")
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(pareto[shown].to_string(index=False))
    print(f"\nPick ({args.folds}-fold cross-validation over questions, seed {args.seed}, metric {args.metric}):")
    print("  setting: " + ", ".join(f"{k}={v}" for k, v in result.setting.items()))
    for name, q in (("in-sample", result.in_sample), ("out-of-fold", result.out_of_fold)):
        print(f"  {name:<12} {args.metric} {q[args.metric]:.3f}   calls/question {q['calls_per_question']:.2f}   "
              f"tokens/question {q['tokens_per_question']:.0f}")
    print(f"  gap (in-sample − out-of-fold): {result.gap:+.3f}; calls are lower bounds where a query needs a re-run")
    return 0


def _print_guarantee(args: argparse.Namespace, exp: Any, front: Any, labels: Any) -> int:
    """``--guarantee``: the procedure, its numbers, the guaranteed settings and the pick."""
    import pandas as pd

    from crag_lab.replay.guarantee import risk_controlled, tightest_bound

    g = risk_controlled(exp, args.guarantee, delta=args.delta, procedure=args.procedure, metric=args.metric,
                        budget_calls=args.budget, needs_rerun=args.needs_rerun, front=front, labels=labels)
    ns = ", ".join(f"{k}: n = {v}" for k, v in g.n.items())
    print(f"{args.experiment}: Learn-then-Test ({g.procedure}, Hoeffding–Bentkus p-values) for {g.guarantee} "
          f"with probability {1 - g.delta:.2f} (delta {g.delta:g}); calibration questions {ns}; a loss replay "
          f"cannot know counts {'as the worst' if g.needs_rerun == 'worst' else 'not (left out)'}.")
    print(f"{int(g.valid.sum())} of {len(g.valid)} settings guaranteed.")
    if g.setting is None:
        print("No setting of the grid can be guaranteed: record more labelled questions, loosen the bound or "
              "raise delta.")
        if len(g.guarantees) == 1:
            tight = tightest_bound(exp, g.guarantees[0], delta=args.delta, procedure=args.procedure, metric=args.metric,
                                   budget_calls=args.budget, needs_rerun=args.needs_rerun, front=front, labels=labels)
            print(f"The tightest bound these questions can guarantee: --guarantee \"{tight.loss}<={tight.alpha:g}\"."
                  if tight is not None else f"Not even the loosest bound of {g.guarantees[0].loss} can be guaranteed.")
        return 0
    table = g.table().sort_values([args.metric, "calls_per_question"], ascending=[False, True]).head(15)
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
    s = g.summary()
    print("\nPick (the guaranteed setting with the most " + args.metric + "):")
    print("  setting: " + ", ".join(f"{k}={v}" for k, v in g.setting.items()))
    risks = ", ".join(f"{k} {v:.3f}" for k, v in s["pick_risk"].items())
    print(f"  calibration risk {risks}; p-value {s['pick_p_value']:.2g}; {args.metric} "
          f"{s['pick_' + args.metric]:.3f}; calls/question {s['pick_calls_per_question']:.2f}")
    return 0
