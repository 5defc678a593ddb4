"""`OfflineModel`: the deterministic default model. No network, no weights beyond MiniLM.

It answers every task in the same raw-text format a remote LLM is asked for (JSON for analyze,
plan and grade; prose with ``[N]`` markers for synthesize), so its output goes through exactly the
parsers and fallbacks an LLM's would. It reads the structured ``inputs`` rather than the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from crag_lab.models import ModelReply, Task, count_tokens
from crag_lab.offline import planner, router, synthesizer

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from crag_lab.offline.grader import CalibratedGrader


class OfflineModel:
    """Heuristic router and planner, calibrated grader, extractive synthesizer.

    >>> from crag_lab.offline import OfflineModel
    >>> OfflineModel().complete("analyze", "", {"query": "hello!", "available_tools": []}).text
    '{"complexity": "chitchat", "grep_keywords": [], "query_type": "chitchat", "sub_questions": [], "suggested_tools": []}'
    """

    name = "offline"

    def __init__(self, embed_model: BaseEmbedding | None = None) -> None:
        self._embed_model = embed_model
        self._grader: CalibratedGrader | None = None

    @property
    def grader(self) -> CalibratedGrader:
        if self._grader is None:
            from crag_lab.offline.grader import CalibratedGrader

            self._grader = CalibratedGrader(embed_model=self._embed_model)
        return self._grader

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The question (first) and passages as MiniLM vectors, for the synthesizer's abstention test."""
        if self._embed_model is None:
            from crag_lab.embeddings import default_embed_model

            self._embed_model = default_embed_model()
        query, *passages = texts
        return [self._embed_model.get_query_embedding(query), *self._embed_model.get_text_embedding_batch(passages)]

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        text = self._answer(task, inputs)
        return ModelReply(text, count_tokens(prompt), count_tokens(text))

    def _answer(self, task: Task, inputs: Mapping[str, Any]) -> str:
        query = str(inputs.get("query", ""))
        if task == "analyze":
            plan = router.analyze(query, available=inputs.get("available_tools", []),
                                  tried=inputs.get("tried_tools", []), retrying=bool(inputs.get("retrying")))
            return json.dumps(plan, sort_keys=True)
        if task == "plan":
            return json.dumps(planner.plan(inputs))
        if task == "grade":
            items = inputs.get("items", [])
            scores = self.grader.score(query, [str(i.get("text", "")) for i in items],
                                       [i.get("title") for i in items])
            return json.dumps(scores)
        if task == "synthesize":
            kind = inputs.get("kind", "answer")
            if kind == "chitchat":
                return synthesizer.chitchat(query)
            if kind == "normal":
                return synthesizer.NORMAL_ANSWER
            return synthesizer.answer(query, inputs.get("evidence", []), embed=self._embed)
        raise ValueError(f"unknown task {task!r}; tasks are analyze, plan, grade, synthesize")
