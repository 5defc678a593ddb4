"""Each evaluation metric on tiny hand-made inputs whose answers are known."""

from __future__ import annotations

import math
from typing import Any

import pytest

from crag_lab.eval import metrics as m
from crag_lab.eval.metrics import LOSS_STAGES, GoldRef, loss_stage
from crag_lab.prompts import NO_EVIDENCE_ANSWER

# ---- the overlap rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "gold", "expected"),
    [
        ((10, 12), (12, 20), True),  # touching at one shared line
        ((10, 12), (13, 20), False),  # adjacent, no shared line
        ((21, 30), (12, 20), False),
        ((1, 100), (12, 20), True),  # item contains the gold range
        ((15, 15), (12, 20), True),  # gold contains the item
        ((15, None), (15, 15), True),  # one-line item without line_end
        ((None, None), (12, 20), True),  # item without lines = whole file
        ((5, 6), (None, None), True),  # gold without lines = whole file
    ],
)
def test_overlaps_edge_cases(item: tuple[int | None, int | None], gold: tuple[int | None, int | None],
                             expected: bool) -> None:
    assert m.overlaps(*item, *gold) is expected


def test_gold_ref_parse_forms_and_errors() -> None:
    assert GoldRef.parse("a/b.md:L3-L5") == GoldRef("a/b.md", 3, 5)
    assert GoldRef.parse("a/b.md:L7") == GoldRef("a/b.md", 7, 7)
    assert GoldRef.parse("a/b.md") == GoldRef("a/b.md")
    assert str(GoldRef.parse("a/b.md:L3-L5")) == "a/b.md:L3-L5"
    with pytest.raises(ValueError, match="ends"):
        GoldRef.parse("a.md:L9-L3")
    with pytest.raises(ValueError, match="empty"):
        GoldRef.parse("  ")


def test_gold_matching_needs_the_same_path_and_overlapping_lines() -> None:
    gold = [GoldRef("svc/README.md", 11, 13), GoldRef("faq.md")]
    assert m.is_gold("svc/README.md", 1, 11, gold)
    assert not m.is_gold("svc/README.md", 14, 30, gold)
    assert not m.is_gold("other/README.md", 11, 13, gold)
    assert m.is_gold("./faq.md", 200, 210, gold)  # whole-file gold, path normalised
    assert not m.is_gold(None, 1, 2, gold)
    assert not m.is_gold("faq.md", 1, 2, [])


def test_location_of_reads_evidence_ids() -> None:
    assert m.location_of("a/b.md:L3-L9") == ("a/b.md", 3, 9)
    assert m.location_of("notes:2024.md:L1-L2") == ("notes:2024.md", 1, 2)
    assert m.location_of("web_fetch#abc123") == ("web_fetch", None, None)


# ---- grader quality ------------------------------------------------------------------------------


def test_auroc_perfect_inverted_and_ties() -> None:
    assert m.auroc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert m.auroc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert m.auroc([0.5, 0.5, 0.5], [True, False, False]) == 0.5
    # pos {0.9, 0.4}, neg {0.4, 0.1}: 3 wins and 1 tie out of 4 pairs.
    assert m.auroc([0.9, 0.4, 0.4, 0.1], [True, True, False, False]) == pytest.approx(0.875)


def test_auroc_matches_scikit_learn_on_tied_scores() -> None:
    sklearn = pytest.importorskip("sklearn.metrics")
    scores = [0.1, 0.4, 0.4, 0.4, 0.7, 0.7, 0.9, 0.2, 0.2, 1.0]
    labels = [False, True, False, True, True, False, True, False, True, True]
    assert m.auroc(scores, labels) == pytest.approx(sklearn.roc_auc_score(labels, scores))


def test_auroc_none_without_both_classes_and_length_mismatch_raises() -> None:
    assert m.auroc([], []) is None
    assert m.auroc([0.2, 0.9], [True, True]) is None
    assert m.auroc([0.2, 0.9], [False, False]) is None
    with pytest.raises(ValueError, match="one label per score"):
        m.auroc([0.1], [True, False])


def test_floor_precision_recall_counts_the_floor_itself_as_kept() -> None:
    p, r = m.floor_precision_recall([0.3, 0.29, 0.8, 0.1], [True, True, False, False], 0.3)
    assert (p, r) == (0.5, 0.5)
    assert m.floor_precision_recall([0.1, 0.2], [True, False], 0.3) == (None, 0.0)
    assert m.floor_precision_recall([0.5], [False], 0.3) == (0.0, None)
    assert m.floor_precision_recall([], [], 0.3) == (None, None)


def test_calibration_bins_put_one_in_the_last_bin_and_clip() -> None:
    bins = m.calibration_bins([0.0, 0.09, 0.1, 0.95, 1.0, 1.2], [False, False, True, True, True, False], bins=10)
    assert [b.count for b in bins] == [2, 1, 0, 0, 0, 0, 0, 0, 0, 3]
    assert bins[0].gold_rate == 0.0 and bins[1].gold_rate == 1.0
    assert bins[9].mean_score == pytest.approx((0.95 + 1.0 + 1.0) / 3)
    assert bins[2].mean_score is None and bins[2].gold_rate is None
    with pytest.raises(ValueError, match="bins"):
        m.calibration_bins([0.5], [True], bins=0)


def test_ece_known_values() -> None:
    # bin [0, 0.5): mean 0.25, gold rate 0.5; bin [0.5, 1]: mean 0.75, gold rate 1.0 -> both gaps 0.25.
    assert m.expected_calibration_error([0.25, 0.25, 0.75, 0.75], [False, True, True, True], bins=2) == 0.25
    # Perfectly calibrated within each bin.
    assert m.expected_calibration_error([0.0, 0.0, 1.0, 1.0], [False, False, True, True]) == 0.0
    # Weighted by count: 3 items at gap 1.0 (bin 9, all non-gold), 1 item at gap 0.0.
    assert m.expected_calibration_error([1.0, 1.0, 1.0, 0.0], [False, False, False, False]) == 0.75
    assert m.expected_calibration_error([], []) is None


# ---- routing -----------------------------------------------------------------------------------------


def test_routing_accuracy_and_chitchat_recall_ignore_unlabelled_questions() -> None:
    predicted = ["chitchat", "simple", "complex", "simple", "simple"]
    expected = ["chitchat", "simple", "simple", "complex", None]
    assert m.routing_accuracy(predicted, expected) == 0.5
    assert m.class_recall(predicted, expected, "chitchat") == 1.0
    assert m.class_recall(predicted, expected, "complex") == 0.0
    assert m.routing_accuracy(["simple"], [None]) is None
    assert m.class_recall(["simple"], ["simple"], "chitchat") is None


def test_confusion_matrix_rows_are_labels_and_unknown_predictions_are_other() -> None:
    cm = m.confusion_matrix(["simple", "complex", None, "weird"], ["simple", "simple", "complex", "chitchat"])
    assert cm["simple"] == {"chitchat": 0, "simple": 1, "complex": 1, "other": 0}
    assert cm["complex"]["other"] == 1 and cm["chitchat"]["other"] == 1
    assert sum(sum(row.values()) for row in cm.values()) == 4
    assert m.confusion_matrix([], [])["simple"]["simple"] == 0


# ---- answers and citations ---------------------------------------------------------------------------

FULL = ("The gateway listens on **8443** [1].\n\nSources:\n[1] services/gw.md:L11-L13\n\n---\n"
        "📊 **LLM Usage Stats:**\n- API calls: 3\n- Total tokens: 10 (prompt 8, completion 2)")


def test_answer_body_drops_footer_and_stats() -> None:
    assert m.answer_body(FULL) == "The gateway listens on **8443** [1]."
    assert m.answer_body("plain") == "plain"
    assert m.answer_body("") == ""


def test_answer_containment_is_case_and_markup_insensitive_and_ignores_the_footer() -> None:
    assert m.answer_contained(FULL, ["8443"]) is True
    assert m.answer_contained("Run `GWCTL certs  rotate` [1].", ["gwctl certs rotate"]) is True
    assert m.answer_contained(FULL, ["11-L13"]) is False  # only in the footer
    assert m.answer_contained(FULL, ["9090", "8443"]) is True  # any gold answer counts
    assert m.answer_contained(FULL, []) is None
    assert m.answer_contained(FULL, ["", "  "]) is None


def test_abstention_is_exactly_the_spec_sentence() -> None:
    stats = "\n\n---\n📊 **LLM Usage Stats:**\n- API calls: 2"
    assert m.is_abstention(NO_EVIDENCE_ANSWER + stats)
    assert not m.is_abstention("Partly: " + NO_EVIDENCE_ANSWER)
    assert not m.is_abstention(FULL)


def test_citation_precision_recall_with_the_overlap_rule() -> None:
    gold = [GoldRef("a.md", 10, 12), GoldRef("b.md", 1, 3)]
    cited = [("a.md", 12, 20), ("a.md", 30, 40), ("c.md", None, None)]
    p, r = m.citation_precision_recall(cited, gold)
    assert p == pytest.approx(1 / 3) and r == 0.5
    assert m.citation_precision_recall([], gold) == (None, 0.0)
    assert m.citation_precision_recall(cited, []) == (0.0, None)
    # Two citations inside one gold range: both precise, the gold counted once.
    assert m.citation_precision_recall([("b.md", 1, 1), ("b.md", 3, 3)], gold) == (1.0, 0.5)


# ---- aggregation helpers -----------------------------------------------------------------------------


def test_rate_and_mean_skip_missing_values() -> None:
    assert m.rate([]) is None and m.rate([None]) is None
    assert m.rate([True, False, None, True]) == pytest.approx(2 / 3)
    assert m.mean([]) is None and m.mean([None, math.nan]) is None
    assert m.mean([1, 2, None]) == 1.5


def test_fast_path_rates_per_round_and_per_question() -> None:
    rates = m.fast_path_rates(["few_context", None, "high_vector_score", None],
                              ["chitchat", "simple", "simple", "complex"])
    assert rates == {"read_file": 0.0, "few_context": 0.25, "high_vector_score": 0.25,
                     "chitchat": 0.25, "simple": 0.5}
    assert set(m.fast_path_rates([], []).values()) == {None}


@pytest.mark.parametrize(("flags", "stage"), [
    ({"contained": True, "abstained": False, "retrieved_gold": False, "evidence_gold": False, "cited_gold": False},
     "answered"),  # contained wins even when the gold passage was never seen (the answer came from elsewhere)
    ({"contained": False, "abstained": True, "retrieved_gold": False, "evidence_gold": False, "cited_gold": False},
     "not_retrieved"),
    ({"contained": False, "abstained": True, "retrieved_gold": True, "evidence_gold": False, "cited_gold": False},
     "dropped_by_grader"),
    ({"contained": False, "abstained": True, "retrieved_gold": True, "evidence_gold": True, "cited_gold": False},
     "abstained"),
    ({"contained": False, "abstained": False, "retrieved_gold": True, "evidence_gold": True, "cited_gold": False},
     "not_cited"),
    ({"contained": False, "abstained": False, "retrieved_gold": True, "evidence_gold": True, "cited_gold": True},
     "not_quoted"),
    ({"contained": None, "abstained": False, "retrieved_gold": True, "evidence_gold": True, "cited_gold": True},
     None),
])
def test_loss_stage_is_the_first_stage_that_missed(flags: dict[str, Any], stage: str | None) -> None:
    assert loss_stage(**flags) == stage
    assert stage is None or stage in LOSS_STAGES


def test_exact_match_and_token_f1_follow_the_official_normalisation() -> None:
    assert m.normalize_answer("The  Chief of Protocol!") == "chief of protocol"
    assert m.exact_match("**Chief of Protocol** [2].", ["chief of protocol"]) is True
    assert m.exact_match("She was Chief of Protocol [2].", ["Chief of Protocol"]) is False
    # partial credit: "she was chief of protocol of us": 3 of 7 tokens are gold, all 3 gold tokens found
    assert m.token_f1("She was the Chief of Protocol of the US [2].", ["Chief of Protocol"]) == pytest.approx(
        2 * (3 / 7) * 1.0 / (3 / 7 + 1.0))
    assert m.token_f1("Paris [1].", ["London", "Paris"]) == 1.0  # the best gold answer counts
    assert m.token_f1(NO_EVIDENCE_ANSWER, ["Paris"]) == 0.0  # an abstention predicts nothing
    assert m.exact_match(NO_EVIDENCE_ANSWER, ["Paris"]) is False
    assert m.token_f1("Paris", []) is None and m.exact_match("Paris", [" "]) is None
    # citation markers are not answer tokens
    assert m.token_f1("1984 [1] [2].", ["1984"]) == 1.0


def test_an_answer_with_a_short_form_is_judged_by_it() -> None:
    answer = "**Tiago Mendes** — Team: Payments; Lead: Tiago Mendes [1].\n\nSources:\n[1] overview.md:L63-L76"
    assert m.short_answer(answer) == "Tiago Mendes"
    assert m.exact_match(answer, ["Tiago Mendes"]) is True and m.token_f1(answer, ["Tiago Mendes"]) == 1.0
    # a wrong lead scores as wrong, even when the quote behind it holds the gold answer
    wrong = "**Ana Costa** — Team: Payments; Lead: Tiago Mendes [1]."
    assert m.exact_match(wrong, ["Tiago Mendes"]) is False and m.token_f1(wrong, ["Tiago Mendes"]) == 0.0
    assert m.answer_contained(wrong, ["Tiago Mendes"]) is True  # containment reads the whole body
    # bold inside prose is no short form: the whole body is the prediction
    prose = "The lead is **Tiago Mendes** [1]."
    assert m.short_answer(prose) is None and m.exact_match(prose, ["Tiago Mendes"]) is False
