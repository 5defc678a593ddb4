"""The reader's FAQ-question penalty, and the reader study's ablations, are wired to what the synthesizer reads.

`bench/study_reader.py` removes each hand-written rule by patching a name in `crag_lab.offline.synthesizer`
or `crag_lab.offline.reading`. A patch of a name the code no longer reads would report "removing it changes
nothing" and the rule would look useless; a patch of a name that is gone must fail loudly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from crag_lab.offline import reading, synthesizer
from crag_lab.offline.reading import UnitReading, unit_support
from crag_lab.offline.units import Unit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def unit(text: str, cos: float, cov: float) -> UnitReading:
    return UnitReading(Unit(1, text, frozenset()), cos, cov, None)


FAQ = unit("**Which port does the gateway listen on?**", 0.70, 0.80)
ANSWER = unit("Public listener: 8443 (TLS)", 0.60, 0.60)


def test_a_unit_that_is_itself_a_question_ranks_and_supports_below_the_unit_that_answers() -> None:
    assert synthesizer.answer_score(FAQ, 0.5) < synthesizer.answer_score(ANSWER, 0.5)
    assert unit_support(FAQ) < unit_support(ANSWER)
    assert reading.question_penalty(FAQ) == reading.QUESTION_PENALTY and reading.question_penalty(ANSWER) == 0.0


def test_without_the_penalty_the_question_wins_in_both_the_ranking_and_the_support(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reading, "QUESTION_PENALTY", 0.0)
    assert synthesizer.answer_score(FAQ, 0.5) > synthesizer.answer_score(ANSWER, 0.5)
    assert unit_support(FAQ) > unit_support(ANSWER)


def test_every_ablation_of_the_reader_study_patches_a_name_that_exists() -> None:
    import study_reader

    before = {name: getattr(synthesizer, name) for name in dir(synthesizer)}
    variants = study_reader.variants(None, None, None)
    assert any(v.startswith("rules − ") for v in variants)
    for name, (context, *_rest) in variants.items():
        with context():  # `patched` reads each name first: a missing one raises AttributeError
            pass
        assert {n: getattr(synthesizer, n) for n in dir(synthesizer)} == before, name  # and puts it back
    assert reading.QUESTION_PENALTY == 0.3
