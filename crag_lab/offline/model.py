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
from crag_lab.offline import planner, replies, router, synthesizer
from crag_lab.offline.router import check_router
from crag_lab.offline.synthesizer import check_lead, check_reader
from crag_lab.offline.vectors import STORE_FILE, VectorCache

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from crag_lab.kb import KnowledgeBase
    from crag_lab.offline.grader import CalibratedGrader


class OfflineModel:
    """Learned router, evidence-driven planner, calibrated grader, extractive synthesizer.

    ``kb`` (optional) seeds the vector cache with the chunk vectors its index already holds, so
    grading and synthesis re-encode none of the chunks a search returns, and keeps what it encodes
    (units, grep blocks, questions) in the knowledge base's cache folder (`vectors.STORE_FILE`),
    so a second session reads them instead of encoding.

    ``router`` picks the router (`crag_lab.offline.router.ROUTERS`): ``"rules"`` or ``"learned"``;
    None reads ``CRAG_OFFLINE_ROUTER`` (`crag_lab.config.OfflineSettings`, default ``"learned"``).
    ``reader`` picks how the synthesizer ranks units and decides to abstain: ``"rules"`` or
    ``"learned"`` (the trained answer scorer, `crag_lab.offline.synthesizer.learned_ranked`); None
    reads ``CRAG_OFFLINE_READER``. ``lead`` says whether the trained span reader helps
    (`crag_lab.learned.SpanReader`): ``"spans"`` (its answer in the first quote as the bold lead) or
    ``"rules"``; None reads ``CRAG_OFFLINE_LEAD``. ``span_first`` (None reads
    ``CRAG_OFFLINE_SPAN_FIRST``, on by default) also quotes the span reader's confident unit first
    (`synthesizer.span_first`). ``spelling`` (None reads ``CRAG_OFFLINE_SPELLING``, on by default) reads a
    misspelt word of the question as the knowledge base spells it (`spelled`; needs ``kb``). ``doubt`` (None
    reads ``CRAG_OFFLINE_DOUBT``, off by default) also abstains when the doubt reader finds no answer
    (`crag_lab.offline.doubt`). An unknown name raises a `ValueError` naming the valid ones.

    >>> import json
    >>> from crag_lab.offline import OfflineModel
    >>> reply = json.loads(OfflineModel().complete("analyze", "", {"query": "hello!", "available_tools": []}).text)
    >>> reply["complexity"], reply["router"]["name"], reply["suggested_tools"]
    ('chitchat', 'learned', [])
    """

    name = "offline"
    in_process = True
    """It computes in this process and never waits on anything outside it, so `crag_lab.models.call_model` runs
    it on the caller's thread, not on a watchdog thread (`crag_lab.models.runs_inline`)."""

    def __init__(self, embed_model: BaseEmbedding | None = None, *, kb: KnowledgeBase | None = None,
                 router: str | None = None, reader: str | None = None, lead: str | None = None,
                 span_first: bool | None = None, spelling: bool | None = None, doubt: bool | None = None) -> None:
        if (router is None or reader is None or lead is None or span_first is None or spelling is None
                or doubt is None):
            from crag_lab.config import OfflineSettings

            settings = OfflineSettings()
            router = settings.router if router is None else router
            reader = settings.reader if reader is None else reader
            lead = settings.lead if lead is None else lead
            span_first = settings.span_first if span_first is None else span_first
            spelling = settings.spelling if spelling is None else spelling
            doubt = settings.doubt if doubt is None else doubt
        self.router = check_router(router)
        self.reader = check_reader(reader)
        self.lead = check_lead(lead)
        self.span_first = bool(span_first) and self.lead == "spans"
        self._scorer: Any = None
        self._spans: Any = None
        self.doubt = bool(doubt)
        self._doubter: Any = None
        self.spelling = bool(spelling)
        self._speller: Any = None
        store = model_name = None
        if kb is not None:
            store, model_name = kb.cache_dir / STORE_FILE, kb.embed_model.model_name
        self.vectors = VectorCache(embed_model, store=store, model_name=model_name or "default")
        self._kb = kb
        self._seeded_done = False
        self._seed_lock = threading.Lock()
        self._grader: CalibratedGrader | None = None

    def _seeded(self) -> VectorCache:
        """The vector cache, seeded on first use with the chunk vectors the knowledge base holds.

        Locked: under ``ask_many`` a second question must not re-encode chunks while the first seeds.
        """
        with self._seed_lock:
            if self._kb is not None and not self._seeded_done:
                keys, vectors = self._kb.passage_vectors()
                self.vectors.add(keys, vectors)
                self._seeded_done = True
        return self.vectors

    def prepare(self) -> int:
        """Encode now the units of every chunk of the knowledge base, as a search would return them.

        What a question would otherwise encode the first time it sees a chunk (about 11 ms a
        sentence on two CPU cores) is then read from the store: run it once after a build and every
        later session answers at warm speed. The vectors are the ones lazy encoding gives (each
        chunk is one group), so answers do not change. Returns the number of texts encoded now
        (0 when the store already held them all).
        """
        from crag_lab.offline.reading import item_groups

        kb = self._kb
        cache = self._seeded()
        before = cache.encoded
        router.prototype_vectors(cache)
        if kb is not None:
            for chunk in kb.chunks:
                for texts in item_groups(chunk.text, chunk.title):
                    cache.group(texts)
        return cache.encoded - before

    def cache_identity(self) -> dict[str, str]:
        """What identifies this model's replies: its name, the grader's calibration
        (`grader.calibration_fingerprint`, the answer scorer's included), and the router and reader
        when they are not the rules (a learned reader with its scorer's fingerprint, span leads with the
        span reader's), and the spelling when it reads a knowledge base's words (`spelled`). A
        response cache or a run journal never mixes their answers: one written before the grader read
        with the answer scorer, or before the learned router became the default, does not match."""
        from crag_lab.offline.grader import calibration_fingerprint

        identity = {"name": self.name, "grader": calibration_fingerprint()}
        if self.router != "rules":
            from crag_lab.learned.router import fingerprint as router_fingerprint

            identity["router"] = self.router
            identity["router_model"] = router_fingerprint()  # its head and token reader
        if self.reader != "rules":
            from crag_lab.learned.scorer import fingerprint

            identity["reader"] = self.reader
            identity["scorer"] = fingerprint()
        if self.lead != "rules":
            from crag_lab.learned.spans import fingerprint as spans_fingerprint

            identity["lead"] = self.lead
            identity["spans"] = spans_fingerprint()
            identity["span_units"] = str(synthesizer.READ_UNITS)  # what it reads of an item
            if not self.span_first:
                identity["span_first"] = "off"
        if self.doubt:
            from crag_lab.learned.spans import DOUBT_DIR
            from crag_lab.learned.spans import fingerprint as spans_fingerprint

            identity["doubt"] = spans_fingerprint(DOUBT_DIR)
        if self.spelling and self._kb is not None:  # without a knowledge base it changes nothing
            identity["spelling"] = "knowledge base + symspellpy English"
        return identity

    @property
    def scorer(self) -> Any:
        """The learned answer scorer (`crag_lab.learned.AnswerScorer`), loaded on first use."""
        if self._scorer is None:
            from crag_lab.learned import AnswerScorer

            self._scorer = AnswerScorer.load()
        return self._scorer

    @property
    def spans(self) -> Any:
        """The span reader (`crag_lab.learned.SpanReader`) of ``lead="spans"``, loaded on first use."""
        if self._spans is None:
            from crag_lab.learned.spans import SpanReader

            self._spans = SpanReader.load()
        return self._spans

    @property
    def doubter(self) -> Any:
        """The doubt reader (`crag_lab.offline.doubt`; a `crag_lab.learned.SpanReader`) of ``doubt``, loaded on first use."""
        if self._doubter is None:
            from crag_lab.learned.spans import DOUBT_DIR, SpanReader

            self._doubter = SpanReader.load(DOUBT_DIR)
        return self._doubter

    @property
    def grader(self) -> CalibratedGrader:
        if self._grader is None:
            from crag_lab.offline.grader import CalibratedGrader

            self._grader = CalibratedGrader(cache=self._seeded())
        return self._grader

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        text, note, weighed = self._answer(task, inputs)
        return ModelReply(text, count_tokens(prompt), count_tokens(text), note=note, weighed=weighed)

    def spelled(self, query: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        """``query`` with its misspelt words as the knowledge base spells them (`crag_lab.offline.spelling`), and
        what changed; as typed when ``spelling`` is off or the model has no knowledge base."""
        if not self.spelling or self._kb is None:
            return query, ()
        if self._speller is None:
            from crag_lab.offline.spelling import of_knowledge_base

            self._speller = of_knowledge_base(self._kb)
        return self._speller.correct(query)  # type: ignore[no-any-return]

    def _answer(self, task: Task, inputs: Mapping[str, Any]) -> tuple[str, str | None, tuple[dict[str, Any], ...]]:
        """The reply's text and, from the synthesizer, why it abstained or how it read the evidence (`ModelReply.note`)
        and the units it weighed (`ModelReply.weighed`)."""
        query, respelled = self.spelled(str(inputs.get("query", "")))
        if respelled:
            inputs = {**inputs, "query": query}
        if task == "analyze":
            plan = router.analyze(query, available=inputs.get("available_tools", []),
                                  tried=inputs.get("tried_tools", []), retrying=bool(inputs.get("retrying")),
                                  vectors=self.vectors, router=self.router)
            return json.dumps(plan, sort_keys=True), None, ()
        if task == "plan":
            return json.dumps(planner.plan(inputs, self._seeded())), None, ()
        if task == "grade":
            return json.dumps(self.grader.score_items(query, inputs.get("items", []))), None, ()
        if task == "synthesize":
            kind = inputs.get("kind", "answer")
            if kind == "chitchat":
                return replies.chitchat(query), None, ()
            if kind == "normal":
                return replies.NORMAL_ANSWER, None, ()
            said = synthesizer.read_answer(query, inputs.get("evidence", []), self._seeded(),
                                           self.scorer if self.reader == "learned" else None,
                                           self.spans if self.lead == "spans" else None, self.span_first,
                                           seen=inputs.get("seen", ()), doubter=self.doubter if self.doubt else None,
                                           complexity=inputs.get("complexity"))
            note = said.why
            if respelled:
                read_as = ", ".join(f"{typed!r} as {kb_word!r}" for typed, kb_word in respelled)
                note = f"read {read_as} (the knowledge base's spelling)" + (f"; {note}" if note else "")
            return said.text, note, said.weighed
        raise ValueError(f"unknown task {task!r}; tasks are analyze, plan, grade, synthesize")
