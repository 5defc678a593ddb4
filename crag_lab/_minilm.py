"""`MemoEmbedding`: LlamaIndex's ``HuggingFaceEmbedding`` that embeds a text it just embedded alone only once.

A question is embedded alone twice per run: by the offline model, which routes and reads the evidence
with its vector, and by the retriever, which searches with it. Both are one-text batches through the
same weights, so the two vectors are equal to the last bit; the second is now a lookup. The key is
the text and the prompt the model puts before it (none for the bundled MiniLM, so a question and a
passage of the same words share a vector, as they always did). Batches of several texts (an index
build, a chunk's units) are never remembered: padding changes their last digits.

A question's vector also outlives the session: `crag_lab.offline.vectors.VectorCache` stores it beside the
index, and hands it back here (`remember`) when a later session reads the question from there.

Its own module so that `crag_lab.embeddings` imports LlamaIndex's Hugging Face package only when the
model is built, and so that the class pickles by reference (Ray workers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.embeddings.huggingface import HuggingFaceEmbedding

ALONE_MEMO = 256
"""How many texts embedded alone (questions, planned searches) are remembered; all are forgotten when full."""


class MemoEmbedding(HuggingFaceEmbedding):
    """``HuggingFaceEmbedding`` remembering the vectors of up to `ALONE_MEMO` texts it embedded alone.

    A plain dict (its reads and writes are atomic under the GIL), so the model still pickles.
    """

    _alone: dict[tuple[str, str], list[float]] = PrivateAttr(default_factory=dict)

    def forget(self) -> None:
        """Forget the texts remembered so far: the next of each is embedded by the weights again (benchmarks
        that time a bare retriever beside the engine call it, so that neither searches with the other's vector)."""
        self._alone.clear()

    def remember(self, text: str, vector: Sequence[float], prompt_name: str = "text") -> None:
        """Take ``vector`` as what the weights give for ``text`` embedded alone: one an earlier session stored
        (`crag_lab.offline.vectors.VectorCache` keeps a question's vector beside its index), so that this
        session's search does not embed the question again."""
        self._keep(self._key(prompt_name, text), [float(x) for x in vector])

    def _key(self, prompt_name: str | None, text: str) -> tuple[str, str]:
        return (getattr(self._model, "prompts", None) or {}).get(prompt_name or "") or "", text

    def _keep(self, key: tuple[str, str], vector: list[float]) -> None:
        if len(self._alone) >= ALONE_MEMO:
            self._alone.clear()
        self._alone[key] = vector

    def _embed(self, inputs: list[Any], prompt_name: str | None = None) -> list[list[float]]:
        if len(inputs) != 1 or not isinstance(inputs[0], str):
            return list(super()._embed(inputs, prompt_name))
        key = self._key(prompt_name, inputs[0])
        known = self._alone.get(key)
        if known is None:
            known = list(super()._embed(inputs, prompt_name)[0])
            self._keep(key, known)
        return [list(known)]
