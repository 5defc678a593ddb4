"""The doubt reader's cut, set on its held-out training data (crag_lab/learned/doubt_cut.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from crag_lab.learned import Span
from crag_lab.learned.doubt_cut import card_update, main, margins


class ByPassage:
    """A reader whose margin is the number the passage starts with; it records what it was asked together."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str]]] = []

    def read(self, question: str, passages: Sequence[str]) -> list[Span]:
        self.asked.append((question, list(passages)))
        return [Span("x", 0, 1, float(p.split()[0])) for p in passages]


def test_each_question_is_read_once_with_all_its_passages_and_rows_keep_their_order() -> None:
    rows = [("q1", "3.0 a", 0, "a", "squad11"), ("q2", "-1.5 b", -1, "", "written-unanswerable"),
            ("q1", "-4.0 c", -1, "", "same-article")]
    reader = ByPassage()
    assert margins(reader, rows) == [("squad11", True, 3.0), ("written-unanswerable", False, -1.5),
                                     ("same-article", False, -4.0)]
    assert reader.asked == [("q1", ["3.0 a", "-4.0 c"]), ("q2", ["-1.5 b"])]


def test_the_card_gets_the_cut_its_rule_and_each_sources_share_below_it() -> None:
    answerable = [("squad11", True, m) for m in (-2.0, 1.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)]
    update = card_update([*answerable, ("written-unanswerable", False, -3.0), ("written-unanswerable", False, 2.0)])
    assert update["abstain_margin"] == 1.0  # one of ten answerable below: 10 %, a second would be 20 %
    assert update["held_out_at_the_cut"] == {"squad11": {"rows": 10, "below_abstain_margin": 0.1},
                                             "written-unanswerable": {"rows": 2, "below_abstain_margin": 0.5}}
    assert "15 %" in update["abstain_rule"]


def test_a_missing_validation_file_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--val .*missing\.json\.gz is not a file; write it with"):
        main(["--val", str(tmp_path / "missing.json.gz"), "--reader", str(tmp_path)])
