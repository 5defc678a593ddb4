"""Learned parts of the offline model: a cross-encoder that scores (question, unit) pairs, and a router.

`AnswerScorer.load()` gives the scorer that ships (the bundled MiniLM plus a small LoRA adapter and
head in ``crag_lab/_data/scorer``); ``python -m crag_lab.learned.train`` rebuilds its training set and
retrains it. Loading needs ``torch``, ``transformers`` and ``peft``; nothing is imported until asked.
`LearnedRouter.load()` gives the router's head (``crag_lab/_data/router``, numpy only), rebuilt by
``python -m crag_lab.learned.train_router``; it is the offline model's default router
(``CRAG_OFFLINE_ROUTER=rules`` brings back the rules). ``CRAG_OFFLINE_READER=learned`` lets the scorer
re-rank what the synthesizer quotes (`crag_lab.offline.synthesizer.learned_ranked`).
"""

from crag_lab.learned.router import LearnedRouter, Route
from crag_lab.learned.scorer import AnswerScorer, ScorerCard

__all__ = ["AnswerScorer", "LearnedRouter", "Route", "ScorerCard"]
