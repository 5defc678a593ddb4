"""Behaviour of the offline calibrated grader (crag_lab/offline/grader.py) on tiny inline inputs."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from crag_lab.offline.grader import (
    FEATURE_NAMES,
    CalibratedGrader,
    GraderFeatures,
    content_terms,
    describe_feature,
    load_calibration,
    relation_query,
    split_sentences,
)

QUERY = "Which river flows through the city of Vienna?"
RELEVANT = "The Danube flows through Vienna, the capital of Austria, on its way to the Black Sea."
UNRELATED = "Photosynthesis converts light energy into chemical energy stored in glucose molecules."
OTHERS = [
    "Vienna is home to many coffee houses and the State Opera.",
    "The Rhine rises in the Swiss Alps and flows into the North Sea.",
    "Mozart spent much of his adult life in Vienna.",
]


@pytest.fixture(scope="session")
def embed_model() -> Any:
    from crag_lab.embeddings import default_embed_model

    return default_embed_model()


@pytest.fixture(scope="session")
def grader(embed_model: Any) -> CalibratedGrader:
    return CalibratedGrader(embed_model=embed_model)


class _FakeEmbed:
    """Deterministic bag-of-words vectors: enough to test the numpy side without the model."""

    dim = 64

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dim)
        for word in content_terms(text):
            v[sum(map(ord, word)) % self.dim] += 1.0
        v[0] += 0.1
        return list(v / np.linalg.norm(v))

    def get_text_embedding_batch(self, texts: list[str], **_: Any) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)


def test_scores_are_probabilities_rounded_to_three_decimals(grader: CalibratedGrader) -> None:
    scores = grader.score(QUERY, [RELEVANT, UNRELATED, *OTHERS], ["Danube", "Photosynthesis", None, "Rhine", ""])
    assert len(scores) == 5
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert all(s == round(s, 3) for s in scores)


def test_scores_are_deterministic(grader: CalibratedGrader) -> None:
    texts = [RELEVANT, UNRELATED, *OTHERS]
    assert grader.score(QUERY, texts) == grader.score(QUERY, texts)


def test_relevant_passage_outscores_unrelated_one(grader: CalibratedGrader) -> None:
    with_titles = grader.score(QUERY, [RELEVANT, UNRELATED], ["Danube", "Photosynthesis"])
    without = grader.score(QUERY, [RELEVANT, UNRELATED])
    assert with_titles[0] > with_titles[1]
    assert without[0] > without[1]
    assert with_titles[1] < 0.3, "an off-topic passage must fall below the 0.3 relevance floor"


def test_very_short_passage_does_not_extrapolate(grader: CalibratedGrader) -> None:
    # log_length is clipped to the training range: two words must not earn a large "short" bonus.
    assert grader.score(QUERY, ["Cats purr."])[0] < 0.3


def test_features_are_clipped_to_the_training_range() -> None:
    params = copy.deepcopy(load_calibration())
    grader = CalibratedGrader(embed_model=_FakeEmbed(), params=params)  # type: ignore[arg-type]
    names = grader.extractor.names
    x = grader.features(QUERY, [RELEVANT])
    far = x.copy()
    far[0, names.index("log_length")] = -100.0
    low = params["models"]["untitled"]["low"][params["models"]["untitled"]["features"].index("log_length")]
    at_low = x.copy()
    at_low[0, names.index("log_length")] = low
    assert grader.probabilities(far)[0] == grader.probabilities(at_low)[0]
    params["models"]["untitled"]["low"] = [1.0] * len(params["models"]["untitled"]["features"])
    with pytest.raises(ValueError, match="low <= high"):
        CalibratedGrader(embed_model=_FakeEmbed(), params=params)  # type: ignore[arg-type]


def test_item_score_does_not_depend_on_the_rest_of_the_batch(grader: CalibratedGrader) -> None:
    alone = grader.score(QUERY, [RELEVANT], ["Danube"])[0]
    batch = grader.score(QUERY, [UNRELATED, *OTHERS, RELEVANT], [None, None, "Rhine", None, "Danube"])
    assert batch[-1] == alone
    one_by_one = [grader.score(QUERY, [t])[0] for t in OTHERS]
    assert grader.score(QUERY, OTHERS) == one_by_one


def test_empty_inputs(grader: CalibratedGrader) -> None:
    assert grader.score(QUERY, []) == []
    assert grader.features(QUERY, []).shape == (0, len(grader.extractor.names))
    scores = grader.score("", ["", "   "])
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)


def test_titles_must_match_texts(grader: CalibratedGrader) -> None:
    with pytest.raises(ValueError, match="titles"):
        grader.score(QUERY, [RELEVANT, UNRELATED], ["only one"])


def test_embeds_all_texts_in_one_batch_call() -> None:
    calls: list[int] = []

    class Counting(_FakeEmbed):
        def get_text_embedding_batch(self, texts: list[str], **kw: Any) -> list[list[float]]:
            calls.append(len(texts))
            return super().get_text_embedding_batch(texts, **kw)

    grader = CalibratedGrader(embed_model=Counting())  # type: ignore[arg-type]
    grader.score(QUERY, [RELEVANT, UNRELATED, *OTHERS], ["Danube", None, None, "Rhine", None])
    assert len(calls) == 1


def test_shipped_coefficients_raise_score_with_cosine() -> None:
    params = load_calibration()
    for key in ("titled", "untitled"):
        model = params["models"][key]
        coef = dict(zip(model["features"], model["coef"], strict=True))
        assert coef["cos_text"] > 0, f"{key}: the passage cosine must count for relevance"
        assert not any("cos_text*" in f or "*cos_text" in f for f in model["features"]), (
            "monotonicity needs a linear term"
        )


def test_score_is_monotone_in_cosine() -> None:
    grader = CalibratedGrader(embed_model=_FakeEmbed())  # type: ignore[arg-type]
    names = grader.extractor.names
    x = np.tile(grader.features(QUERY, [RELEVANT], ["Danube"]), (21, 1))
    x[:, names.index("cos_text")] = np.linspace(-0.2, 1.0, 21)
    probs = grader.probabilities(x)
    assert np.all(np.diff(probs) >= 0)
    assert probs[-1] > probs[0]


def test_untitled_items_use_the_title_free_model() -> None:
    grader = CalibratedGrader(embed_model=_FakeEmbed())  # type: ignore[arg-type]
    x = grader.features(QUERY, [RELEVANT, RELEVANT, RELEVANT], ["Vienna", None, "  "])
    col = grader.extractor.names.index("title_exact")
    assert x[0, col] == 1.0 and np.isnan(x[1, col]) and np.isnan(x[2, col])
    probs = grader.probabilities(x)
    assert np.all(np.isfinite(probs)) and probs[1] == probs[2]
    params = load_calibration()
    only = {"models": {"untitled": params["models"]["untitled"]}}
    untitled_only = CalibratedGrader(embed_model=_FakeEmbed(), params=only)  # type: ignore[arg-type]
    assert untitled_only.score(QUERY, [RELEVANT], ["Vienna"]) == untitled_only.score(QUERY, [RELEVANT])


def test_calibration_map_is_applied_with_interp() -> None:
    params = copy.deepcopy(load_calibration())
    for model in params["models"].values():
        model["calibration"] = {"x": [0.0, 1.0], "y": [0.5, 0.5]}
    grader = CalibratedGrader(embed_model=_FakeEmbed(), params=params)  # type: ignore[arg-type]
    assert grader.score(QUERY, [RELEVANT, UNRELATED]) == [0.5, 0.5]


def test_bad_params_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="'models'"):
        CalibratedGrader(embed_model=_FakeEmbed(), params={})  # type: ignore[arg-type]
    params = copy.deepcopy(load_calibration())
    params["models"]["untitled"]["features"][0] = "cosine"
    with pytest.raises(ValueError, match="valid: cos_text"):
        CalibratedGrader(embed_model=_FakeEmbed(), params=params)  # type: ignore[arg-type]


def test_unknown_feature_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="cos_title"):
        GraderFeatures(["cos_text", "bogus"])
    with pytest.raises(ValueError, match="hinge"):
        GraderFeatures(["bogus>0.5"])
    assert GraderFeatures(["cos_text*cos_title"]).uses_title_embedding
    assert not GraderFeatures(["cos_text", "title_exact"]).uses_title_embedding


def test_derived_features_are_products_and_hinges() -> None:
    names = ["query_coverage", "query_coverage>0.4", "query_coverage*query_coverage"]
    emb = _FakeEmbed()
    x = GraderFeatures(names).extract(
        "red green blue yellow",
        ["red green blue here", "nothing matches"],
        None,
        lambda texts: np.asarray(emb.get_text_embedding_batch(texts)),
        lambda q: np.asarray(emb.get_query_embedding(q)),
    )
    np.testing.assert_allclose(x, [[0.75, 0.35, 0.5625], [0.0, 0.0, 0.0]])
    assert describe_feature("query_coverage>0.4").startswith("max(0, share of the query's content words")


def test_feature_extraction_counts_overlaps() -> None:
    fx = GraderFeatures(FEATURE_NAMES)
    emb = _FakeEmbed()
    x = fx.extract(
        "Where was Ada Lovelace born in 1815?",
        ["Ada Lovelace was born in London in 1815.", "Cats sleep a lot."],
        ["Ada Lovelace", "Cat"],
        lambda texts: np.asarray(emb.get_text_embedding_batch(texts)),
        lambda q: np.asarray(emb.get_query_embedding(q)),
    )
    row = dict(zip(FEATURE_NAMES, x[0], strict=True))
    assert row["entity_coverage"] == 1.0  # Ada, Lovelace, 1815
    assert row["number_match"] == 1.0
    assert row["title_exact"] == 1.0 and row["title_in_query"] == 1.0
    assert dict(zip(FEATURE_NAMES, x[1], strict=True))["query_coverage"] == 0.0


def test_relation_query_drops_names_and_quoted_titles() -> None:
    assert relation_query('Who directed the film "Big Stone Gap" in 2014?') == "Who directed the film in"
    assert relation_query("where is Vienna") == "where is"


def test_text_helpers() -> None:
    assert content_terms("The cities' rivers are flowing") == ["city", "river", "flow"]
    assert split_sentences("") == []
    assert split_sentences("One short line") == ["One short line"]
    sents = split_sentences("First sentence is here. Second one is here too.\n\n- a list item with words")
    assert sents == ["First sentence is here.", "Second one is here too.", "- a list item with words"]
