"""Learned parts of the offline model: a cross-encoder that scores (question, unit) pairs, and a router.

`AnswerScorer.load()` gives the scorer that ships (the bundled MiniLM plus a small LoRA adapter and
head in ``crag_lab/_data/scorer``); ``python -m crag_lab.learned.train`` rebuilds its training set and
retrains it. Loading needs ``torch``, ``transformers`` and ``peft``; nothing is imported until asked.
`LearnedRouter.load()` gives the router's head (``crag_lab/_data/router``, numpy only), rebuilt by
``python -m crag_lab.learned.train_router``; it is the offline model's default router
(``CRAG_OFFLINE_ROUTER=rules`` brings back the rules). ``CRAG_OFFLINE_READER=learned`` lets the scorer
re-rank what the synthesizer quotes (`crag_lab.offline.synthesizer.learned_ranked`). `SpanReader.load()`
gives the extractive span reader (``crag_lab/_data/spans``) that picks the exact words an offline
answer opens with (`crag_lab.offline.synthesizer.span_lead`); ``crag_lab/learned/fit_spans.py`` trains it.
"""

from crag_lab.learned.router import LearnedRouter, Route
from crag_lab.learned.scorer import AnswerScorer, ScorerCard
from crag_lab.learned.spans import Span, SpanReader

__all__ = ["AnswerScorer", "LearnedRouter", "Route", "ScorerCard", "Span", "SpanReader"]
