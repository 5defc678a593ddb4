"""Behaviour of the offline grader (crag_lab/offline/grader.py) and the reading it scores."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from crag_lab.offline.grader import GRADER_FEATURES, CalibratedGrader, load_calibration
from crag_lab.offline.reading import coverage, features, read, unit_support
from crag_lab.offline.vectors import VectorCache

QUERY = "Which port does the api-gateway accept public TLS traffic on?"
RELEVANT = "## Ports\n\n| Field | Value |\n|---|---|\n| Public TLS port | 8443 |\n| Admin port | 9000 |"
UNRELATED = "Photosynthesis converts light energy into chemical energy stored in glucose molecules."
OTHERS = [
    "The gateway team meets every Tuesday to review incidents.",
    "Certificates are renewed by the platform team every 90 days.",
]


@pytest.fixture(scope="module")
def grader() -> CalibratedGrader:
    return CalibratedGrader()


def test_scores_are_probabilities_rounded_to_three_decimals(grader: CalibratedGrader) -> None:
    scores = grader.score(QUERY, [RELEVANT, UNRELATED, *OTHERS])
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert all(round(s, 3) == s for s in scores)


def test_relevant_item_reads_as_enough_and_noise_as_noise(grader: CalibratedGrader) -> None:
    relevant, unrelated = grader.score(QUERY, [RELEVANT, UNRELATED], ["api-gateway", "Biology"])
    assert relevant >= 0.7 > 0.3 > unrelated


def test_item_score_depends_on_the_rest_of_the_batch_only_through_the_bridge(grader: CalibratedGrader) -> None:
    alone = grader.score(QUERY, [RELEVANT], ["api-gateway"])
    batch = grader.score(QUERY, [UNRELATED, *OTHERS, RELEVANT], ["Biology", "Meetings", "Certificates", "api-gateway"])
    assert alone[0] == batch[-1]  # no other item names "api-gateway"


def test_an_item_another_item_names_gets_that_items_match_as_its_bridge() -> None:
    from crag_lab.offline.grader import bridge_scores

    cache = VectorCache()
    items = [{"text": "The api-gateway keeps its TLS sessions in Ledger Store.", "title": "api-gateway"},
             {"text": "Port 5433, replicated twice.", "title": "Ledger Store"},
             {"text": "Backups run nightly.", "title": "Backups"},
             {"text": "Ledger Store is also named here.", "title": "Ledger Store"}]
    reading = read("Which port does the api-gateway's session store use?", items, cache)
    bridges = bridge_scores(reading)
    assert bridges[1] == pytest.approx(reading.items[0].cos)  # named by the item that matches the question
    assert bridges[0] == bridges[2] == 0.0  # nobody names them
    assert bridges[3] == pytest.approx(reading.items[0].cos)  # an item of the same title never bridges itself
    assert bridge_scores(read(reading.query, items[1:2], cache))[0] == 0.0  # graded alone: nothing names it
    assert bridge_scores(read(reading.query, [{"text": "See DB.", "title": "x"}, {"text": "x", "title": "DB"}],
                              cache)).tolist() == [0.0, 0.0]  # "x" and "db" are too short to be names


def test_the_shipped_bridge_raises_a_named_items_grade(grader: CalibratedGrader) -> None:
    from crag_lab.offline.grader import BRIDGE_FEATURE

    assert BRIDGE_FEATURE in grader.feature_names
    question = "Which port does the api-gateway's session store use?"
    target = {"text": "Port 5433, replicated twice.", "title": "Ledger Store"}
    alone = grader.score_items(question, [target])[0]
    named = grader.score_items(question, [
        {"text": "The api-gateway keeps its TLS sessions in Ledger Store.", "title": "api-gateway"}, target])[1]
    assert named > alone


def test_empty_inputs_and_mismatched_titles(grader: CalibratedGrader) -> None:
    assert grader.score(QUERY, []) == []
    with pytest.raises(ValueError, match="one title"):
        grader.score(QUERY, ["a", "b"], ["only one"])


def test_index_vectors_are_reused_not_re_encoded() -> None:
    class CountingEmbed:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def get_text_embedding_batch(self, texts: list[str]) -> list[list[float]]:
            self.calls.append(list(texts))
            return [[float(len(t)), 1.0, 0.5] for t in texts]

    embed = CountingEmbed()
    cache = VectorCache(embed)  # type: ignore[arg-type]
    item = {"text": "Port 8443.", "path": "gw.md", "title": "Gateway"}
    from crag_lab.offline.vectors import passage_key

    cache.add([passage_key(item["text"], item["path"], item["title"])], np.array([[1.0, 0.0, 0.0]]))
    read("port?", [item], cache)
    encoded = [t for call in embed.calls for t in call]
    assert passage_key(item["text"], item["path"], item["title"]) not in encoded  # the stored vector was used
    before = cache.encoded
    read("port?", [item], cache)
    assert cache.encoded == before  # the second reading encodes nothing


def test_features_follow_the_reading() -> None:
    class Embed:
        def get_text_embedding_batch(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, float("8443" in t), 0.1] for t in texts]

    cache = VectorCache(Embed())  # type: ignore[arg-type]
    reading = read("Which port?", [{"text": "The gateway port is 8443."}, {"text": "Lunch is at noon."}], cache)
    rows = [features(item, reading.kind) for item in reading.items]
    named = [dict(zip(GRADER_FEATURES, row, strict=True)) for row in rows]
    assert named[0]["kind_found"] == 1.0 and named[1]["kind_found"] == 0.0  # a number for "which port"
    assert named[0]["coverage_item"] == 1.0 and named[1]["coverage_item"] == 0.0


def test_coverage_credits_context_at_half_weight() -> None:
    assert coverage(["port", "gateway"], frozenset({"port", "gateway"})) == 1.0
    assert coverage(["port", "gateway"], frozenset({"port"}), frozenset({"gateway"})) == 0.75
    assert coverage([], frozenset({"x"})) == 0.0


def test_question_shaped_units_never_support_an_answer() -> None:
    from crag_lab.offline.reading import UnitReading
    from crag_lab.offline.units import Unit

    answer = UnitReading(Unit(1, "The port is 8443.", frozenset({"port"})), 0.6, 1.0, True)
    faq = UnitReading(Unit(1, "**Which port is it?**", frozenset({"port"})), 0.6, 1.0, True)
    assert unit_support(answer) > unit_support(faq)


def test_shipped_calibration_is_valid_and_raises_score_with_meaning() -> None:
    data = load_calibration()
    assert data["model"]["features"][:len(GRADER_FEATURES)] == list(GRADER_FEATURES)
    coef = dict(zip(data["model"]["features"], data["model"]["coef"], strict=True))
    assert coef["cos_best_unit"] + coef["cos_item"] > 0
    assert coef["coverage_best_unit"] + coef["coverage_item"] > 0
    assert coef.get("scorer_logit", 1.0) > 0  # the scorer's reading raises the grade
    cv = data["cross_validation"]
    assert {"kb", "squad", "docs", "multihop"} <= set(cv)
    fitted = ("kb", "squad", "docs", "multihop")
    assert {cv[dom]["how"] for dom in fitted} == {"out of fold"}  # fitted there, measured out of fold
    assert all(r["how"] == "held out" for dom, r in cv.items() if dom in ("kb-test", "hotpotqa"))


def test_features_are_clipped_to_the_training_range(grader: CalibratedGrader) -> None:
    model = load_calibration()["model"]
    high = np.asarray(model["high"])
    beyond = grader.probabilities((high + 100.0)[None, :])
    at = grader.probabilities(high[None, :])
    assert beyond[0] == pytest.approx(at[0])


def test_bad_params_name_what_is_wrong() -> None:
    params: dict[str, Any] = copy.deepcopy(load_calibration())
    del params["model"]["coef"]
    with pytest.raises(ValueError, match="coef"):
        CalibratedGrader(params=params)
    params = copy.deepcopy(load_calibration())
    params["model"]["features"] = ["cos_text"]
    with pytest.raises(ValueError, match="refit"):
        CalibratedGrader(params=params)
    params = copy.deepcopy(load_calibration())
    params["model"]["features"] = [*GRADER_FEATURES, "bridge", "scorer_logit"]  # the optional ones out of order
    for key in ("low", "high", "mean", "scale", "coef"):
        params["model"][key] = [0.0] * len(GRADER_FEATURES) + [0.0, 0.0]
    with pytest.raises(ValueError, match="in that order"):
        CalibratedGrader(params=params)


class _FakeScorer:
    """Scores a pair by whether its text holds '8443'; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def predict(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        self.asked += pairs
        return np.asarray([0.9 if "8443" in text else 0.02 for _, text in pairs], dtype=np.float32)


def test_scorer_logits_read_each_items_best_supported_units_only() -> None:
    from crag_lab.offline.grader import SCORER_UNITS, scorer_logits

    long_item = "\n".join(f"- Rule {i}: the gateway rotates key {i} weekly." for i in range(10))
    reading = read(QUERY, [{"text": RELEVANT, "title": "api-gateway"}, {"text": long_item}, {"text": ""}], VectorCache())
    scorer = _FakeScorer()
    logits = scorer_logits(reading, scorer)
    assert logits[0] == pytest.approx(np.log(0.9 / 0.1), abs=1e-4)
    assert logits[1] == pytest.approx(np.log(0.02 / 0.98), abs=1e-4)
    assert logits[2] == pytest.approx(np.log(1e-4 / (1 - 1e-4)))  # no units: the floor
    assert len(scorer.asked) == min(len(reading.items[0].units), SCORER_UNITS) + SCORER_UNITS
    assert all(text.startswith("api-gateway: ") for _, text in scorer.asked[:2])


def test_the_scorer_column_is_read_only_when_the_calibration_uses_it() -> None:
    from crag_lab.offline.grader import SCORER_FEATURE

    params: dict[str, Any] = copy.deepcopy(load_calibration())
    model = params["model"]
    for key in ("low", "high", "mean", "scale", "coef"):  # a seven-feature calibration never asks the scorer
        model[key] = model[key][:len(GRADER_FEATURES)]
    model["features"] = list(GRADER_FEATURES)
    scorer = _FakeScorer()
    seven = CalibratedGrader(params=params, scorer=scorer)
    assert seven.feature_names == GRADER_FEATURES
    seven.score(QUERY, [RELEVANT])
    assert scorer.asked == []
    eight = copy.deepcopy(params)
    for key, value in (("low", -9.2), ("high", 9.2), ("mean", 0.0), ("scale", 1.0), ("coef", 1.0)):
        eight["model"][key] = [*eight["model"][key], value]
    eight["model"]["features"] = [*GRADER_FEATURES, SCORER_FEATURE]
    with_scorer = CalibratedGrader(params=eight, scorer=scorer)
    assert with_scorer.features(read(QUERY, [{"text": RELEVANT}], VectorCache())).shape == (1, len(GRADER_FEATURES) + 1)
    held, not_held = with_scorer.score(QUERY, ["Public TLS port: 8443", "Public TLS port: 9000"])
    assert scorer.asked and held > not_held  # the scorer's reading moves the grade


def test_a_response_cache_written_with_another_calibration_does_not_match() -> None:
    from crag_lab.offline import OfflineModel
    from crag_lab.offline.grader import calibration_fingerprint

    identity = OfflineModel().cache_identity()
    assert identity["grader"] == calibration_fingerprint() and len(identity["grader"]) == 12
    calibration_fingerprint.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as mp:
            changed = copy.deepcopy(load_calibration())
            changed["model"]["intercept"] += 0.1
            mp.setattr("crag_lab.offline.grader.load_calibration", lambda: changed)
            assert OfflineModel().cache_identity()["grader"] != identity["grader"]
        calibration_fingerprint.cache_clear()
        with pytest.MonkeyPatch.context() as mp:  # the same calibration over another answer scorer
            mp.setattr("crag_lab.learned.scorer.fingerprint", lambda folder=None: "another-scorer")
            assert OfflineModel().cache_identity()["grader"] != identity["grader"]
    finally:
        calibration_fingerprint.cache_clear()
