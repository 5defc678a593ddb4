"""`OfflineModel`: the deterministic default model. No network, no weights beyond MiniLM.

It answers every task in the same raw-text format a remote LLM is asked for (JSON for analyze,
plan and grade; prose with ``[N]`` markers for synthesize), so its output goes through exactly the
parsers and fallbacks an LLM's would. It reads the structured ``inputs`` rather than the prompt.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crag_lab.models import ModelReply, Task, count_tokens
from crag_lab.offline import planner, router, synthesizer
from crag_lab.offline.vectors import VectorCache

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from crag_lab.kb import KnowledgeBase
    from crag_lab.offline.grader import CalibratedGrader


class OfflineModel:
    """Prototype router, evidence-driven planner, calibrated grader, extractive synthesizer.

    ``kb`` (optional) seeds the vector cache with the chunk vectors its index already holds, so
    grading and synthesis re-encode none of the chunks a search returns.

    >>> from crag_lab.offline import OfflineModel
    >>> OfflineModel().complete("analyze", "", {"query": "hello!", "available_tools": []}).text
    '{"complexity": "chitchat", "grep_keywords": [], "query_type": "chitchat", "sub_questions": [], "suggested_tools": []}'
    """

    name = "offline"

    def __init__(self, embed_model: BaseEmbedding | None = None, *, kb: KnowledgeBase | None = None) -> None:
        self.vectors = VectorCache(embed_model)
        self._kb = kb
        self._seed_lock = threading.Lock()
        self._grader: CalibratedGrader | None = None

    def _seeded(self) -> VectorCache:
        """The vector cache, seeded on first use with the chunk vectors the knowledge base holds.

        Locked: under ``ask_many`` a second question must not re-encode chunks while the first seeds.
        """
        with self._seed_lock:
            if self._kb is not None:
                keys, vectors = self._kb.passage_vectors()
                self.vectors.add(keys, vectors)
                self._kb = None
        return self.vectors

    @property
    def grader(self) -> CalibratedGrader:
        if self._grader is None:
            from crag_lab.offline.grader import CalibratedGrader

            self._grader = CalibratedGrader(cache=self._seeded())
        return self._grader

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        text = self._answer(task, inputs)
        return ModelReply(text, count_tokens(prompt), count_tokens(text))

    def _answer(self, task: Task, inputs: Mapping[str, Any]) -> str:
        query = str(inputs.get("query", ""))
        if task == "analyze":
            plan = router.analyze(query, available=inputs.get("available_tools", []),
                                  tried=inputs.get("tried_tools", []), retrying=bool(inputs.get("retrying")),
                                  vectors=self.vectors)
            return json.dumps(plan, sort_keys=True)
        if task == "plan":
            return json.dumps(planner.plan(inputs, self._seeded()))
        if task == "grade":
            return json.dumps(self.grader.score_items(query, inputs.get("items", [])))
        if task == "synthesize":
            kind = inputs.get("kind", "answer")
            if kind == "chitchat":
                return synthesizer.chitchat(query)
            if kind == "normal":
                return synthesizer.NORMAL_ANSWER
            return synthesizer.answer(query, inputs.get("evidence", []), self._seeded())
        raise ValueError(f"unknown task {task!r}; tasks are analyze, plan, grade, synthesize")
