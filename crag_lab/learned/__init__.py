"""Learned parts of the offline model: a cross-encoder that scores (question, unit) pairs.

`AnswerScorer.load()` gives the scorer that ships (the bundled MiniLM plus a small LoRA adapter and
head in ``crag_lab/_data/scorer``); ``python -m crag_lab.learned.train`` rebuilds its training set and
retrains it. Loading needs ``torch``, ``transformers`` and ``peft``; nothing is imported until asked.
"""

from crag_lab.learned.scorer import AnswerScorer, ScorerCard

__all__ = ["AnswerScorer", "ScorerCard"]
