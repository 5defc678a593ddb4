"""Both labelled question splits agree with the knowledge base they are about (scripts/check_queries.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("split", ["kb_queries.jsonl", "kb_queries_test.jsonl"])
def test_labels_point_at_real_lines_that_hold_the_answer(split: str) -> None:
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_queries.py"), str(ROOT / "data" / split),
                          str(ROOT / "data" / "kb")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_checker_catches_a_wrong_answer(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x1", "question": "Which port?", "complexity": "simple", "answerable": true, '
                   '"answer": "no-such-answer-string", "gold": ["faq.md:L1-L2"], "tools": ["vector_search"]}\n',
                   encoding="utf-8")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_queries.py"), str(bad),
                          str(ROOT / "data" / "kb")], capture_output=True, text=True)
    assert run.returncode != 0
