"""Regrade a recording: every grade replaced by another grader's, retrieval and labels left as recorded.

"Which grader should I use?" needs the same retrieved items graded by each candidate. `regrade`
keeps every round's items, its recorded decision (``action``, ``kept``, ``dropped``: where the
recorded run went) and the labels, and replaces each grade the grader gave (and the shadow grades of
rounds the pre-filter skipped) with the new grader's, exactly as the graph would have graded them:
the items new in a round graded together, the items kept from an earlier round carrying that
round's grade. Replay then re-decides every round with the new grades, and a round whose decision
now differs from the recorded one leaves the recording (``needs_rerun``), as replay always says.

A grader is any of (`as_grader`):

- ``"offline"``: the offline model's calibrated grader, through the same prompt and parser as a run;
- ``"learned"``: the trained cross-encoder (`crag_lab.learned.AnswerScorer`): an item's grade is the
  best of its units' scores;
- any LlamaIndex LLM or `crag_lab.models.CragModel` (the ``llm=`` line-up), with an optional
  response cache (`crag_lab.cache.ResponseCache`) so a second regrade makes no call;
- a function ``(question, item_text) -> float``, used as given, item by item;
- an object with ``name`` and ``grade(question, items) -> Graded`` (`Grader`).

Recordings keep item ids, not texts: ``texts`` says where the texts are (the knowledge-base folder
the recording was made on, a `crag_lab.kb.KnowledgeBase`, a mapping of item id to text, or a
function of the item). A grader that raises, or returns NaN or a value outside [0, 1], stops the
regrade with one `crag_lab.errors.GraderError` naming the grader, the query id and the item, before
anything is returned. The new experiment's ``meta["grader"]`` records the provenance: the grader's
name, when, what it cost (``calls``, of which ``cached_calls`` the response cache answered; tokens;
seconds), for a model the model itself (``model``: its id, sampling parameters and token caps), and
what it replaced.

>>> exp = Experiment.load("notebooks/recordings/kb_knowledge_base.jsonl")  # doctest: +SKIP
>>> by_len = exp.regrade(lambda q, text: min(len(text) / 400, 1.0), texts="data/kb")  # doctest: +SKIP
>>> by_len.meta["grader"]["name"], by_len.replay().outcome_counts()  # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias, TypeVar, runtime_checkable

from crag_lab.config import CragConfig
from crag_lab.decisions import PARSE_FAILURE_SCORE
from crag_lab.errors import GraderError
from crag_lab.records import ItemRecord, QueryRecord, RoundRecord, UsageRecord, usage_tokens

if TYPE_CHECKING:
    from crag_lab.cache import ResponseCache
    from crag_lab.kb import KnowledgeBase
    from crag_lab.models import CragModel


class Recording(Protocol):
    """What `regrade` reads of an `Experiment` (a dataclass: the copy it returns is one too)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    config: CragConfig
    records: list[QueryRecord]
    meta: dict[str, Any]


R = TypeVar("R", bound=Recording)

GRADE_NODE = "grade_evidence"


class EvidenceText(dict[str, Any]):
    """An item as a grader reads it: ``id``, ``text``, ``title``, ``path``, ``line``, ``line_end``."""


@dataclass
class Graded:
    """What a grader gave for one batch: one grade per item, the model calls it made, whether it parsed."""

    scores: list[float]
    usage: list[UsageRecord] = field(default_factory=list)
    parse_ok: bool = True


@runtime_checkable
class Grader(Protocol):
    """Grades the items new in one round of one question (see the module docstring)."""

    name: str

    def grade(self, question: str, items: Sequence[EvidenceText], iteration: int) -> Graded: ...


GradeFunction: TypeAlias = Callable[[str, str], float]
GraderLike: TypeAlias = "Grader | GradeFunction | CragModel | str | Any"
ItemTexts: TypeAlias = ("KnowledgeBase | str | Path | Mapping[str, str | Mapping[str, Any]] | "
                        "Callable[[Any], str | Mapping[str, Any]] | None")


class _ItemFailed(Exception):
    """A grader failed on item ``index`` of its batch (so the error can name that item)."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.index, self.error = index, error


class FunctionGrader:
    """A user's function ``(question, item_text) -> float``, called item by item, as given.

    >>> FunctionGrader(lambda q, t: 0.9 if "8443" in t else 0.1).grade("Which port?", [{"text": "port 8443"}], 1).scores
    [0.9]
    """

    def __init__(self, fn: GradeFunction, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__

    def grade(self, question: str, items: Sequence[EvidenceText], iteration: int) -> Graded:
        scores = []
        for i, item in enumerate(items):
            try:
                scores.append(self.fn(question, str(item["text"])))
            except Exception as exc:
                raise _ItemFailed(i, exc) from exc
        return Graded(scores)


class LearnedGrader:
    """The trained answer scorer (`crag_lab.learned.AnswerScorer`): an item's grade is the best score of
    its units (``"Title: unit"``, cut as the offline model cuts evidence), the whole text when it has none."""

    name = "learned"

    def __init__(self, scorer: Any = None) -> None:
        if scorer is None:
            from crag_lab.learned import AnswerScorer

            scorer = AnswerScorer.load()
        self.scorer = scorer

    def grade(self, question: str, items: Sequence[EvidenceText], iteration: int) -> Graded:
        from crag_lab.learned.data import unit_text
        from crag_lab.offline.units import units_of

        pairs: list[tuple[str, str]] = []
        owner: list[int] = []
        for i, item in enumerate(items):
            title = str(item.get("title") or "")
            texts = [unit_text(title, u) for u in units_of(i + 1, str(item["text"]), title)] or [str(item["text"])]
            pairs += [(question, t) for t in texts]
            owner += [i] * len(texts)
        predicted = self.scorer.predict(pairs) if pairs else []
        best = [0.0] * len(items)
        for i, p in zip(owner, predicted, strict=True):
            best[i] = max(best[i], round(float(p), 3))
        return Graded(best)


class ModelGrader:
    """A model of the ``llm=`` line-up asked the ``grade`` task with the graph's own prompt and parser
    (one batch call per round, or one call per item under ``grading="per_item"``). A reply that does not
    parse grades every item 0.5, as the graph does; a call that still fails after ``retries`` raises."""

    def __init__(self, model: CragModel, *, grading: str = "batch", retries: int = 2, timeout_s: float = 60.0,
                 backoff_s: float = 0.5, name: str | None = None) -> None:
        if grading not in ("batch", "per_item"):
            raise ValueError(f"grading must be 'batch' or 'per_item', got {grading!r}")
        self.model, self.grading = model, grading
        self.retries, self.timeout_s, self.backoff_s = retries, timeout_s, backoff_s
        self.name = name or str(getattr(model, "name", type(model).__name__))

    def _call(self, prompt: str, inputs: Mapping[str, Any], iteration: int) -> tuple[str, UsageRecord]:
        from crag_lab.models import call_model

        outcome = call_model(self.model, "grade", prompt, inputs, retries=self.retries, timeout_s=self.timeout_s,
                             backoff_s=self.backoff_s)
        if outcome.reply is None:
            raise RuntimeError("; ".join(outcome.errors) or "no reply")
        reply = outcome.reply
        usage = UsageRecord(node=GRADE_NODE, task="grade", prompt_tokens=reply.prompt_tokens,
                            completion_tokens=reply.completion_tokens, latency_ms=round(outcome.latency_ms, 3),
                            ok=True, attempts=outcome.attempts, iteration=iteration)
        if reply.cached:
            usage["cached"] = True
        return reply.text, usage

    def grade(self, question: str, items: Sequence[EvidenceText], iteration: int) -> Graded:
        from crag_lab.parsing import parse_grades, parse_single_grade, strip_stats_blocks
        from crag_lab.prompts import GRADE, GRADE_ONE, render_passage

        payload = [{"text": strip_stats_blocks(str(i["text"])), "title": i.get("title"), "path": i.get("path")}
                   for i in items]
        if self.grading == "per_item":
            scores, usages, ok = [], [], True
            for k, (item, one) in enumerate(zip(items, payload, strict=True)):
                try:
                    text, usage = self._call(GRADE_ONE.format(query=question, passage=render_passage(item)),
                                             {"query": question, "items": [one]}, iteration)
                except Exception as exc:
                    raise _ItemFailed(k, exc) from exc
                usages.append(usage)
                score = parse_single_grade(text)
                ok = ok and score is not None
                scores.append(PARSE_FAILURE_SCORE if score is None else score)
            return Graded(scores, usages, ok)
        passages = "\n\n".join(render_passage(item, n) for n, item in enumerate(items, 1))
        text, usage = self._call(GRADE.format(query=question, passages=passages, n=len(items)),
                                 {"query": question, "items": payload}, iteration)
        parsed = parse_grades(text, len(items))
        if parsed is None:
            return Graded([PARSE_FAILURE_SCORE] * len(items), [usage], False)
        return Graded(parsed, [usage], True)


def as_grader(grader: GraderLike, *, cache: ResponseCache | str | Path | None = None, grading: str = "batch",
              kb: KnowledgeBase | None = None, config: CragConfig | None = None) -> Grader:
    """Any grader of the module docstring as a `Grader`; an unknown name raises ``ValueError`` listing them."""
    from crag_lab.cache import with_cache

    cfg = config or CragConfig()

    def model_grader(model: CragModel, name: str | None = None) -> ModelGrader:
        return ModelGrader(with_cache(model, cache), grading=grading, retries=cfg.model_retries,
                           timeout_s=cfg.model_timeout_s, backoff_s=cfg.retry_backoff_s, name=name)

    if isinstance(grader, str):
        if grader == "offline":
            from crag_lab.offline import OfflineModel

            return model_grader(OfflineModel(kb=kb), "offline")
        if grader == "learned":
            return LearnedGrader()
        raise ValueError(f"unknown grader {grader!r}; choose 'offline', 'learned', a LlamaIndex LLM or crag_lab "
                         "model, a function (question, item_text) -> float, or a Grader")
    if isinstance(grader, Grader):
        return grader
    if hasattr(grader, "complete"):
        from crag_lab.models import as_model
        from crag_lab.offline import OfflineModel

        model = as_model(grader, offline_factory=OfflineModel)
        return model_grader(model)
    if callable(grader):
        return FunctionGrader(grader)
    raise TypeError(f"cannot grade with a {type(grader).__name__}; give 'offline', 'learned', a LlamaIndex LLM or "
                    "crag_lab model, a function (question, item_text) -> float, or a Grader")


# ---- item texts -------------------------------------------------------------------------------

def text_source(texts: ItemTexts) -> tuple[Callable[[ItemRecord], Mapping[str, Any] | None], KnowledgeBase | None]:
    """A function from a recorded item to its text (and title), and the knowledge base it reads, if any."""
    from crag_lab.kb import KnowledgeBase

    if texts is None:
        raise ValueError("a recording keeps item ids, not their texts: give texts= (the knowledge-base folder the "
                         "recording was made on, a KnowledgeBase, a mapping of item id to text, or a function of "
                         "the item)")
    if isinstance(texts, (str, Path)):
        texts = KnowledgeBase.load(texts)
    if isinstance(texts, KnowledgeBase):
        kb = texts

        def from_kb(item: ItemRecord) -> Mapping[str, Any] | None:
            from crag_lab.eval.metrics import location_of

            path, line, end = location_of(item["id"])
            if line is None:
                return None
            try:
                passage = kb.read(path, line, end)
            except Exception:
                return None
            return {"text": passage.text, "title": kb._title_at(passage.path, line), "line_end": passage.line_end}

        return from_kb, kb
    if isinstance(texts, Mapping):
        table = texts

        def from_mapping(item: ItemRecord) -> Mapping[str, Any] | None:
            value = table.get(item["id"])
            return {"text": value} if isinstance(value, str) else value

        return from_mapping, None
    if callable(texts):
        fn = texts

        def from_function(item: ItemRecord) -> Mapping[str, Any] | None:
            value = fn(item)
            return {"text": value} if isinstance(value, str) else value

        return from_function, None
    raise TypeError(f"texts must be a knowledge-base folder, a KnowledgeBase, a mapping or a function, "
                    f"got {type(texts).__name__}")


# ---- the regrade ------------------------------------------------------------------------------

def _check(grader: Grader, graded: Any, query_id: str, items: Sequence[EvidenceText]) -> Graded:
    if not isinstance(graded, Graded):
        graded = Graded(list(graded))
    if len(graded.scores) != len(items):
        raise GraderError(f"grader {grader.name!r} gave {len(graded.scores)} grades for the {len(items)} items of "
                          f"query {query_id!r} (items {[i['id'] for i in items][:5]}); give one grade per item")
    for item, score in zip(items, graded.scores, strict=True):
        ok = isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score) \
            and 0.0 <= score <= 1.0
        if not ok:
            raise GraderError(f"grader {grader.name!r} gave {score!r} for item {item['id']!r} of query {query_id!r}; "
                              "a grade must be a number in [0, 1]")
    graded.scores = [float(s) for s in graded.scores]
    return graded


def _grade_batch(grader: Grader, question: str, query_id: str, items: Sequence[EvidenceText],
                 iteration: int) -> Graded:
    try:
        graded = grader.grade(question, items, iteration)
    except GraderError:
        raise
    except _ItemFailed as exc:
        raise GraderError(f"grader {grader.name!r} failed on item {items[exc.index]['id']!r} of query {query_id!r}: "
                          f"{type(exc.error).__name__}: {exc.error}"[:600]) from exc.error
    except Exception as exc:
        raise GraderError(f"grader {grader.name!r} failed on query {query_id!r} (items "
                          f"{[i['id'] for i in items][:5]}): {type(exc).__name__}: {exc}"[:600]) from exc
    return _check(grader, graded, query_id, items)


def _evidence(item: ItemRecord, text_of: Callable[[ItemRecord], Mapping[str, Any] | None],
              query_id: str) -> EvidenceText:
    from crag_lab.eval.metrics import location_of

    found = text_of(item)
    if not found or not isinstance(found.get("text"), str):
        raise GraderError(f"no text for item {item['id']!r} of query {query_id!r}: the texts given do not hold it "
                          "(regrade needs the knowledge base the recording was made on, or every item's text)")
    end = location_of(item["id"])[2]
    return EvidenceText(id=item["id"], text=found["text"], title=found.get("title"), path=item.get("path"),
                        line=item.get("line"), line_end=found.get("line_end", end))


@dataclass
class _Regraded:
    record: QueryRecord
    calls: int = 0
    cached: int = 0
    tokens: int = 0
    items: int = 0
    parse_failures: int = 0


def _regrade_record(record: QueryRecord, grader: Grader,
                    text_of: Callable[[ItemRecord], Mapping[str, Any] | None]) -> _Regraded:
    """One record with its grades replaced (a deep copy; the input is not touched)."""
    query_id, question = str(record.get("id")), str(record["query"])
    out = _Regraded(copy.deepcopy(record))
    carried: dict[str, float] = {}
    usage_by_iteration: dict[int, list[UsageRecord]] = {}
    rounds: list[RoundRecord] = out.record.get("rounds", [])
    for rnd in rounds:
        items = rnd["items"]
        shadow = rnd.get("shadow")
        if rnd.get("rule") is not None and not shadow:
            carried = {item["id"]: float(item["grader_score"]) for item in items}  # no grades to replace
            continue
        fresh = [i for i, item in enumerate(items) if item.get("new", True) or item["id"] not in carried]
        evidence = [_evidence(items[i], text_of, query_id) for i in fresh]
        graded = _grade_batch(grader, question, query_id, evidence, int(rnd["iteration"]) - 1) if evidence else Graded([])
        new = dict(zip(fresh, graded.scores, strict=True))
        scores = [new[i] if i in new else carried[item["id"]] for i, item in enumerate(items)]
        out.items += len(fresh)
        out.parse_failures += not graded.parse_ok
        out.calls += len(graded.usage)
        out.cached += sum(1 for u in graded.usage if u.get("cached"))
        out.tokens += usage_tokens(graded.usage)
        if rnd.get("rule") is None:
            for item, score in zip(items, scores, strict=True):
                item["grader_score"] = score
            rnd["grader_calls"], rnd["grader_tokens"] = len(graded.usage), usage_tokens(graded.usage)
            rnd["parse_ok"] = graded.parse_ok
            usage_by_iteration[int(rnd["iteration"]) - 1] = list(graded.usage)
            carried = {item["id"]: score for item, score in zip(items, scores, strict=True)}
        else:  # shadow grades decide nothing: the rule's grades are what the next round would carry
            rnd["shadow"] = {"scores": scores, "usage": list(graded.usage)}
            carried = {item["id"]: float(item["grader_score"]) for item in items}
    if usage_by_iteration:  # the run's own grading calls: the old grader's out, the new one's in their place
        usage: list[UsageRecord] = []
        placed: set[int] = set()
        for u in out.record.get("usage", []):
            it = int(u.get("iteration", 0))
            if u["node"] == GRADE_NODE and it in usage_by_iteration:
                if it not in placed:
                    usage += usage_by_iteration[it]
                    placed.add(it)
                continue
            usage.append(u)
        out.record["usage"] = usage
    return out


def _model_of(grader: Grader) -> dict[str, Any]:
    """``{"model": ...}``: what identifies a model grader's replies (its class, model id, sampling and caps,
    as the response cache keys them; the endpoint left out), so the provenance names the model, not only
    the adapter; empty for any other grader."""
    from crag_lab.cache import cache_identity

    return {"model": cache_identity(grader.model)} if isinstance(grader, ModelGrader) else {}


def regrade(experiment: R, grader: GraderLike, *, texts: ItemTexts = None,
            cache: ResponseCache | str | Path | None = None, concurrency: int = 1, name: str | None = None) -> R:
    """A new `Experiment`: the same rounds, items, recorded decisions and labels, every grade ``grader``'s.

    Parameters
    ----------
    experiment
        The recording (not changed).
    grader
        See the module docstring (`as_grader`).
    texts
        Where the item texts are: the knowledge-base folder of the recording, a `KnowledgeBase`, a
        mapping ``{item id: text or {"text", "title"}}`` or a function of the recorded item.
    cache
        A response cache for a model grader (a second regrade with the same model makes no call).
    concurrency
        Questions graded at once (threads; for a model server, its parallel slots).
    name
        The grader's name in the provenance (default: its own).

    Raises `crag_lab.errors.GraderError` (naming the query id and the item) for a grader that fails
    or gives anything but a number in [0, 1], and for an item whose text is not found.
    """
    text_of, kb = text_source(texts)
    g = as_grader(grader, cache=cache, grading=experiment.config.grading, kb=kb, config=experiment.config)
    label = name or g.name
    started = time.perf_counter()
    records = list(experiment.records)
    if concurrency > 1:
        with concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix="crag-regrade") as pool:
            done = list(pool.map(lambda r: _regrade_record(r, g, text_of), records))
    else:
        done = [_regrade_record(r, g, text_of) for r in records]
    seconds = time.perf_counter() - started
    previous = experiment.meta.get("grader") or {"name": experiment.meta.get("model", "recorded")}
    meta = {**copy.deepcopy(experiment.meta), "grader": {
        "name": label, "regraded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "items_graded": sum(d.items for d in done), "calls": sum(d.calls for d in done),
        "cached_calls": sum(d.cached for d in done), "tokens": sum(d.tokens for d in done),
        "parse_failures": sum(d.parse_failures for d in done), "seconds": round(seconds, 3),
        **_model_of(g), "replaced": previous}}
    return dataclasses.replace(experiment, records=[d.record for d in done], meta=meta)


def grading_model(grader: GraderLike, *, name: str | None = None) -> CragModel:
    """``grader`` as a model that answers only the ``grade`` task, so that a real run grades with it:
    ``Lab(tools, llm=TaskModels({"grade": grading_model(fn)}, default))``. Its replies are the JSON
    arrays the graph's parser reads; it makes no model call of its own.

    >>> grading_model(lambda q, t: 0.25).complete("grade", "", {"query": "q", "items": [{"text": "a"}]}).text
    '[0.25]'
    """
    import json

    from crag_lab.models import ModelReply

    g = as_grader(grader)

    class _GradingModel:
        def __init__(self) -> None:
            self.name = name or f"grader:{g.name}"

        def complete(self, task: str, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
            if task != "grade":
                raise ValueError(f"a grading model answers only the grade task, not {task!r}")
            items = [EvidenceText(id=f"#{n}", **dict(i)) for n, i in enumerate(inputs.get("items", []), 1)]
            scores = _grade_batch(g, str(inputs.get("query", "")), "(live run)", items, 0).scores
            return ModelReply(json.dumps(scores), 0, 0)

    return _GradingModel()


__all__ = ["EvidenceText", "FunctionGrader", "GradeFunction", "Graded", "Grader", "GraderLike", "ItemTexts",
           "LearnedGrader", "ModelGrader", "as_grader", "grading_model", "regrade", "text_source"]
