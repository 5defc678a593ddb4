"""The reader ceiling: how much a better reader could add on the evidence the pipeline already found.

The offline synthesizer ranks every unit of its evidence (`crag_lab.offline.synthesizer.ranked`:
sentences, list items, table rows, code lines) and quotes the best. For a question with a gold
answer, `answer_rank` is the rank of the first unit that holds it; over a question set, `oracle_at`
is the share of questions a reader that always picks right among the top ``k`` units would answer —
the most an LLM or an extractive QA model could add on the same evidence and the same units.
`pick_prompt` and `parse_pick` ask a real model to be that reader (`bench/study_reader_ceiling.py`).

>>> answer_rank(["Owner: Payments", "Lead: Tiago Mendes"], ["Tiago Mendes"])
2
>>> oracle_at([1, 2, None, 5], (1, 3))
{1: 0.25, 3: 0.5}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from crag_lab.eval.metrics import answer_contained


def answer_rank(texts: Sequence[str], answers: Sequence[str]) -> int | None:
    """The 1-based rank of the first text that holds a gold answer (the metric's containment test);
    None when no text does or there is no gold answer.

    >>> answer_rank(["a", "b"], ["c"]), answer_rank(["a"], [])
    (None, None)
    """
    for rank, text in enumerate(texts, start=1):
        if answer_contained(text, answers):
            return rank
    return None


def oracle_at(ranks: Sequence[int | None], ks: Iterable[int]) -> dict[int, float]:
    """For each ``k``, the share of questions whose answer is held by one of the top ``k`` units.

    ``ranks`` has one entry per question (`answer_rank`; None when no unit holds the answer or the
    question reached no synthesizer), so the shares are over every question, as containment is.
    """
    n = len(ranks)
    return {k: (sum(1 for r in ranks if r is not None and r <= k) / n if n else 0.0) for k in ks}


PICK_INSTRUCTION = ("Which numbered passage answers the question? Reply with the passage number only. "
                    "If none answers it, reply 0.")


def pick_prompt(question: str, texts: Sequence[str], max_chars: int = 400) -> str:
    """The reader's task: the question and the candidate units, numbered from 1.

    >>> print(pick_prompt("Which port?", ["Port: 8443"]))
    Question: Which port?
    <BLANKLINE>
    Passages:
    1. Port: 8443
    <BLANKLINE>
    Which numbered passage answers the question? Reply with the passage number only. If none answers it, reply 0.
    Answer:
    """
    lines = "\n".join(f"{i}. {' '.join(text.split())[:max_chars]}" for i, text in enumerate(texts, start=1))
    return f"Question: {question}\n\nPassages:\n{lines}\n\n{PICK_INSTRUCTION}\nAnswer:"


def parse_pick(reply: str, k: int) -> int | None:
    """The passage number a reply names (1..k), 0 for "none answers", None when it names neither.

    >>> parse_pick("Passage 2.", 3), parse_pick("0", 3), parse_pick("7", 3), parse_pick("the second", 3)
    (2, 0, None, None)
    """
    match = re.search(r"\d+", reply)
    if match is None:
        return None
    pick = int(match.group())
    return pick if 0 <= pick <= k else None
