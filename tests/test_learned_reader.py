"""The learned reader (CRAG_OFFLINE_READER=learned): the trained scorer re-orders the top of the
synthesizer's ranking and decides when to abstain, against the threshold its training data set."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from crag_lab.learned import ScorerCard
from crag_lab.offline import OfflineModel, synthesizer
from crag_lab.offline.reading import read
from crag_lab.offline.synthesizer import LEARNED_TOP_K, LEARNED_WEIGHT, READ_UNITS, choose, learned_ranked, ranked, respond
from crag_lab.offline.vectors import VectorCache
from crag_lab.prompts import NO_EVIDENCE_ANSWER

RUNBOOK = {"n": 1, "title": "Certificate rotation", "path": "runbooks/certs.md",
           "text": "# Certificate rotation\n\nCertificates are rotated every 90 days by the platform team.\n\n"
                   "Rotation is announced in #platform a day before.\n\nRun `gwctl certs rotate --env prod` to rotate them."}
QUESTION = "How often are certificates rotated?"


class FakeScorer:
    """A scorer that gives ``favourite`` probability ``high`` and everything else ``low``; it counts pairs."""

    def __init__(self, favourite: str, high: float = 0.99, low: float = 0.01, abstain_below: float = 0.6) -> None:
        self.favourite, self.high, self.low = favourite, high, low
        self.card = ScorerCard(128, abstain_below, {})
        self.seen: list[tuple[str, str]] = []

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self.seen += list(pairs)
        return np.array([self.high if self.favourite in text else self.low for _, text in pairs], dtype=np.float32)


@pytest.fixture(scope="module")
def vectors() -> VectorCache:
    return VectorCache()


def test_the_scorer_reads_only_the_top_units_keyed_by_title_and_can_promote_one(vectors: VectorCache) -> None:
    reading = read(QUESTION, [RUNBOOK], vectors)
    rules = ranked(reading)
    runner_up = rules[1][1].unit.text
    scorer = FakeScorer(runner_up)
    ordered, best_p = learned_ranked(reading, scorer)
    assert len(scorer.seen) == min(LEARNED_TOP_K, len(rules))
    assert all(text.startswith("Certificate rotation") and ": " in text for _, text in scorer.seen)
    assert best_p == pytest.approx(0.99)
    # the runner-up gains LEARNED_WEIGHT * (0.99 - 0.01) over the leader: it leads when the rules' margin is smaller
    margin = rules[0][0] - rules[1][0]
    assert (ordered[0][1].unit.text == runner_up) == (margin < LEARNED_WEIGHT * 0.98)
    assert sorted(u.unit.text for _, u in ordered) == sorted(u.unit.text for _, u in rules)


def test_the_learned_reader_abstains_below_the_scorers_threshold_and_says_so(vectors: VectorCache,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    reading = read(QUESTION, [RUNBOOK], vectors)
    assert not choose(reading, FakeScorer("90 days", high=0.61), "scorer").abstains
    doubtful = choose(reading, FakeScorer("90 days", high=0.59), "scorer")
    assert doubtful.abstains and doubtful.support == pytest.approx(0.59) and doubtful.abstain_below == 0.6
    by_rules = choose(reading, FakeScorer("90 days", high=0.59), "rules")
    assert not by_rules.abstains and by_rules.measure == "support" and by_rules.abstain_below == 0.75
    monkeypatch.setattr(synthesizer, "LEARNED_ABSTAINS_BY", "scorer")
    text, why = respond(QUESTION, [RUNBOOK], vectors, FakeScorer("90 days", high=0.59))
    assert text == NO_EVIDENCE_ANSWER
    assert why is not None and "learned scorer" in why and "0.59" in why and "threshold 0.6" in why


def test_either_withholds_when_the_scorer_or_the_rules_fall_short(vectors: VectorCache) -> None:
    reading = read(QUESTION, [RUNBOOK], vectors)
    sure = choose(reading, FakeScorer("90 days", high=0.61), "either")
    assert not sure.abstains and sure.measure == "support"
    doubtful = choose(reading, FakeScorer("90 days", high=0.59), "either")
    assert doubtful.abstains and doubtful.measure == "answer probability" and doubtful.abstain_below == 0.6
    weak = read("what is the maximum size of an uploaded image?", [RUNBOOK], vectors)
    assert choose(weak, FakeScorer("nothing", high=0.9, low=0.9), "either").abstains
    with pytest.raises(ValueError, match="abstain_by='both'"):
        choose(reading, FakeScorer("90 days", high=0.61), "both")


def test_the_shipped_scorer_answers_and_withholds(vectors: VectorCache) -> None:
    model = OfflineModel(reader="learned")
    answered = model.complete("synthesize", "", {"query": QUESTION, "evidence": [RUNBOOK]})
    assert "90 days" in answered.text and "[1]" in answered.text
    assert answered.note is not None and "the rules' best unit is in item [1]" in answered.note
    unrelated = "what is the maximum size of an uploaded image?"
    withheld = model.complete("synthesize", "", {"query": unrelated, "evidence": [RUNBOOK]})
    assert withheld.text == NO_EVIDENCE_ANSWER and withheld.note is not None and "below" in withheld.note


def test_the_setting_picks_the_reader_and_it_is_part_of_the_models_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    from crag_lab.learned.router import fingerprint as router_fingerprint
    from crag_lab.learned.scorer import fingerprint
    from crag_lab.learned.spans import fingerprint as spans_fingerprint
    from crag_lab.offline.grader import calibration_fingerprint

    grader = calibration_fingerprint()
    leads = {"lead": "spans", "spans": spans_fingerprint(), "span_units": str(READ_UNITS)}
    router = {"router": "learned", "router_model": router_fingerprint()}
    assert OfflineModel().reader == "rules"
    assert OfflineModel().cache_identity() == {"name": "offline", "grader": grader, **router, **leads}
    monkeypatch.setenv("CRAG_OFFLINE_READER", "learned")
    assert OfflineModel().reader == "learned"
    scorer = fingerprint()
    assert OfflineModel().cache_identity() == {"name": "offline", "grader": grader, **router,
                                               "reader": "learned", "scorer": scorer, **leads}
    assert OfflineModel(router="rules", lead="rules").cache_identity() == {
        "name": "offline", "grader": grader, "reader": "learned", "scorer": scorer}
    assert OfflineModel(reader="rules").reader == "rules"


def test_an_unknown_reader_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"unknown reader 'smart'; choose one of: rules, learned"):
        OfflineModel(reader="smart")
    from crag_lab._preflight import check_settings
    from crag_lab.errors import SettingsError

    monkeypatch.setenv("CRAG_OFFLINE_READER", "smart")
    with pytest.raises(SettingsError, match=r"CRAG_OFFLINE_READER='smart'.*'rules' or 'learned'"):
        check_settings("no-such-file.env")
