"""Evaluation harness: labelled query sets, every mode of the agent, metrics against the labels.

>>> from crag_lab.eval import auroc, expected_calibration_error
>>> auroc([0.9, 0.2, 0.6], [True, False, False])
1.0
"""

from crag_lab.eval.datasets import EvalQuery, EvalSet, Passage, load_beir, load_dataset, load_kb_queries
from crag_lab.eval.metrics import (
    GoldRef,
    answer_body,
    answer_contained,
    auroc,
    calibration_bins,
    citation_precision_recall,
    class_recall,
    confusion_matrix,
    expected_calibration_error,
    fast_path_rates,
    floor_precision_recall,
    is_abstention,
    is_gold,
    overlaps,
    routing_accuracy,
)
from crag_lab.eval.runner import COMPARED_MODES, EVAL_MODES, Evaluation, evaluate, mode_setup

__all__ = [
    "COMPARED_MODES",
    "EVAL_MODES",
    "EvalQuery",
    "EvalSet",
    "Evaluation",
    "GoldRef",
    "Passage",
    "answer_body",
    "answer_contained",
    "auroc",
    "calibration_bins",
    "citation_precision_recall",
    "class_recall",
    "confusion_matrix",
    "evaluate",
    "expected_calibration_error",
    "fast_path_rates",
    "floor_precision_recall",
    "is_abstention",
    "is_gold",
    "load_beir",
    "load_dataset",
    "load_kb_queries",
    "mode_setup",
    "overlaps",
    "routing_accuracy",
]
