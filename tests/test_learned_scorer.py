"""The shipped answer scorer: loads offline from the repository, scores deterministically, and reads."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from crag_lab.learned import AnswerScorer
from crag_lab.learned.scorer import SCORER_DIR

PAIRS = [
    ("Which port does the ingress accept TLS traffic on?", "Ingress > Ports: Public listener: 9443 (TLS)"),
    ("Which port does the ingress accept TLS traffic on?",
     "Ingress > History: The ingress was written in 2019 by the platform team."),
    ("Who leads the billing team?", "Teams: Team: Billing; Lead: Mara Okafor; Slack: #billing"),
    ("Who leads the billing team?", "Teams: Team: Search; Lead: Ola Berg; Slack: #search"),
    ("What is the retention period of the audit log?", "Audit log: Retention: 400 days; Storage: cold bucket"),
    ("What is the retention period of the audit log?", "Audit log: Owner: Security; Storage: cold bucket"),
]


@pytest.fixture(scope="module")
def scorer() -> AnswerScorer:
    return AnswerScorer.load()


def test_only_the_adapter_head_and_card_ship_and_they_are_small() -> None:
    files = {p.name: p.stat().st_size for p in SCORER_DIR.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "scorer.json", "DATA_CARD.md"} <= set(files)
    assert sum(files.values()) < 5 * 1024 * 1024


def test_scores_are_probabilities_in_input_order_and_repeatable(scorer: AnswerScorer) -> None:
    first = scorer.predict(PAIRS)
    assert first.shape == (len(PAIRS),) and ((first >= 0) & (first <= 1)).all()
    np.testing.assert_array_equal(first, scorer.predict(PAIRS))
    np.testing.assert_array_equal(scorer.predict(PAIRS[::-1]), first[::-1])


def test_a_pairs_score_does_not_depend_on_its_batch(scorer: AnswerScorer) -> None:
    long_pair = (PAIRS[0][0], "Ingress > Ports: " + " ".join(f"| listener-{k} | {9000 + k} | internal |" for k in range(30)))
    pairs = [*PAIRS, long_pair]
    shapes: list[tuple[int, int]] = []
    model = scorer._model
    scorer._memo.clear()
    try:
        scorer._model = lambda **batch: shapes.append(tuple(batch["input_ids"].shape)) or model(**batch)
        together = scorer.predict(pairs)
    finally:
        scorer._model = model
    assert len(shapes) == 2 and min(shapes, key=lambda shape: shape[1])[0] == len(PAIRS)  # the long pair pads no other
    alone = []
    for pair in pairs:
        scorer._memo.clear()
        alone.append(scorer.predict([pair])[0])
    np.testing.assert_allclose(together, alone, atol=1e-4)


def test_the_answering_text_scores_above_its_near_miss(scorer: AnswerScorer) -> None:
    scores = scorer.predict(PAIRS)
    for answer, near_miss in zip(scores[0::2], scores[1::2], strict=True):
        assert answer > near_miss


def test_a_folder_without_a_trained_scorer_names_itself_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"scorer\.json.*python -m crag_lab\.learned\.train"):
        AnswerScorer.load(tmp_path)


def test_no_text_no_work(scorer: AnswerScorer) -> None:
    assert scorer.predict([]).shape == (0,)


@pytest.mark.parametrize("folder", ["scorer", "router/tuned", "router/other_languages/tuned", "spans"])
def test_loading_a_shipped_adapter_is_quiet_but_other_warnings_still_show(folder: str) -> None:
    from crag_lab.learned.fit_spans import load_base as span_base
    from crag_lab.learned.scorer import base_model, merged, model_dir

    path = SCORER_DIR.parent / folder
    config = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
    labels = {"scorer": 1}.get(folder, 3)
    model = span_base(model_dir())[0] if folder == "spans" else base_model(num_labels=labels)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged_model = merged(model, path)
        warnings.warn("a warning of crag_lab's own", FutureWarning, stacklevel=1)
    assert config["peft_type"] == "LORA" and not merged_model.training
    assert [str(w.message) for w in caught] == ["a warning of crag_lab's own"]
