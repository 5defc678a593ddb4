"""`Lab`: the notebook-facing entry point. A knowledge base, a model, a config; ask questions."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from crag_lab._text import check_history, check_question, check_questions
from crag_lab.audit import JsonlSink
from crag_lab.cache import ResponseCache, check_cache_file, with_cache
from crag_lab.config import CragConfig, VectorStoreConfig
from crag_lab.graph import MODES, build_graph, initial_state
from crag_lab.models import CragModel, TaskModels, as_model, model_identity
from crag_lab.records import Mode, QueryRecord, QueryRow, query_rows
from crag_lab.replay import Experiment
from crag_lab.result import AskResult
from crag_lab.state import AgentState
from crag_lab.tools import Tool, ToolRegistry

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from crag_lab.dashboard import Dashboard
    from crag_lab.journal import AnswerMany
    from crag_lab.kb import KnowledgeBase
    from crag_lab.ray_executor import Executor
    from crag_lab.traces import LiveTraces

__all__ = ["AskResult", "Lab", "LabRecipe"]


class Lab:
    """A corrective-RAG agent over one knowledge base, ready to ask, run, replay and explore.

    Build it with `Lab.from_directory` (indexes the folder, or reloads its index). ``llm=None``
    uses the deterministic offline model; any LlamaIndex LLM or crag_lab model plugs in instead.

    >>> lab = Lab.from_directory("data/kb")  # doctest: +SKIP
    >>> lab.ask("How do I rotate the gateway certificates?").path  # doctest: +SKIP
    ['analyze_and_route', 'plan', 'tool_exec', 'synthesize']
    """

    def __init__(
        self,
        tools: ToolRegistry | Sequence[Tool],
        *,
        config: CragConfig | None = None,
        llm: Any | None = None,
        kb: KnowledgeBase | None = None,
        embed_model: BaseEmbedding | None = None,
        audit_path: str | Path | None = None,
        cache: ResponseCache | str | Path | None = None,
        tracer_provider: Any | None = None,
    ) -> None:
        from crag_lab.offline import OfflineModel

        self.config = config or CragConfig()
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.kb = kb
        # ``cache``: a response cache (`crag_lab.cache`, a SQLite file): a re-run makes no call twice.
        self.model: CragModel = with_cache(as_model(llm, offline_factory=lambda: OfflineModel(embed_model, kb=kb)),
                                           cache)
        self.audit_sink = JsonlSink(audit_path) if audit_path else None
        # ``tracer_provider`` (an OpenTelemetry one), or ``CRAG_OTEL_ENDPOINT``: each question's spans as it is
        # answered (`crag_lab.traces.LiveTraces`). Neither: nothing of OpenTelemetry is imported.
        self.traces: LiveTraces | None = _live_traces(tracer_provider, self.model.name)
        self._graphs: dict[tuple[Mode, CragConfig, bool], CompiledStateGraph] = {}
        self.recipe: LabRecipe | None = None
        """How to build this lab again in another process (set by `from_directory`; None otherwise)."""

    @classmethod
    def from_directory(
        cls,
        path: str | Path,
        config: CragConfig | None = None,
        llm: Any | None = None,
        *,
        cache_dir: str | Path | None = None,
        remote: bool = True,
        audit_path: str | Path | None = None,
        cache: ResponseCache | str | Path | None = None,
        vector_store: VectorStoreConfig | None = None,
        tracer_provider: Any | None = None,
    ) -> Lab:
        """Index ``path`` (only files that changed since the last build are embedded) and wrap it.

        Parameters
        ----------
        path
            The knowledge-base folder (Markdown and text files). A missing or empty folder fails at
            once, before the embedding model loads.
        config
            The agent's thresholds and limits; default ``CragConfig()`` (arguments > environment >
            ``.env`` > defaults).
        llm
            Any LlamaIndex LLM or `crag_lab.models.CragModel`; None uses the deterministic offline model.
            A mapping of task to LLM (``{"synthesize": reader}``) asks only those tasks of it and the
            offline model the rest (`crag_lab.models.TaskModels`).
        cache_dir
            Where the index lives; default ``<path>/.crag_index/``.
        remote
            Remote connectors (jira_fetch, confluence_fetch, web_fetch) join the tool set only when
            their environment is configured; ``remote=False`` leaves them out regardless.
        audit_path
            A JSONL file every audit event is appended to as it happens; default none.
        cache
            A response cache (`crag_lab.cache.ResponseCache` or the path of its SQLite file): replies
            are stored by model, task, prompt and generation parameters, so re-running an experiment
            with a real model makes zero calls and gives identical records; default none.
        vector_store
            Where the chunk vectors live: FAISS in the index folder (the default) or a Qdrant
            collection (`crag_lab.config.VectorStoreConfig`; default read from the environment).
        tracer_provider
            An OpenTelemetry ``TracerProvider`` that receives each question's spans as it is answered
            (`crag_lab.traces`); default none, or an OTLP exporter to ``CRAG_OTEL_ENDPOINT`` when set.
        """
        from crag_lab.embeddings import default_embed_model
        from crag_lab.kb import KnowledgeBase
        from crag_lab.kb._documents import check_folder
        from crag_lab.tools.kb_tools import kb_tools

        config = config or CragConfig()
        # Settings, the cache file and the folder fail now, naming what is wrong, not after the model loads:
        remote_settings = None
        if remote:
            from crag_lab.tools.remote import RemoteSettings, configured_remote_tools

            remote_settings = RemoteSettings()
        if vector_store is None:
            VectorStoreConfig()  # the CRAG_* settings the build reads
        if cache is not None and not isinstance(cache, ResponseCache):
            check_cache_file(cache)
        check_folder(path)
        embed_model = default_embed_model()
        kb = KnowledgeBase.build(path, embed_model=embed_model, cache_dir=cache_dir, vector_store=vector_store)
        tools: list[Tool] = list(kb_tools(kb, top_k=config.top_k))
        if remote:
            tools += configured_remote_tools(remote_settings)
        lab = cls(tools, config=config, llm=llm, kb=kb, embed_model=embed_model, audit_path=audit_path, cache=cache,
                  tracer_provider=tracer_provider)
        lab.recipe = LabRecipe(str(kb.root), config, llm, str(kb.cache_dir), remote,
                               None if cache is None or isinstance(cache, ResponseCache) else str(cache),
                               kb.vector_store)
        return lab

    def graph(self, mode: Mode = "knowledge_base", config: CragConfig | None = None, *,
              shadow_grading: bool = False) -> CompiledStateGraph:
        """The compiled graph for a mode, config and shadow-grading flag (built once, then reused)."""
        config = config or self.config
        key = (mode, config, shadow_grading)
        if key not in self._graphs:
            self._graphs[key] = build_graph(self.model, self.tools, config, mode=mode, audit_sink=self.audit_sink,
                                            shadow_grading=shadow_grading)
        return self._graphs[key]

    def _check_mode(self, mode: str) -> Mode:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {list(MODES)}")
        return mode  # type: ignore[return-value]

    def ask(
        self,
        query: str,
        history: list[dict[str, str]] | None = None,
        mode: Mode = "knowledge_base",
        *,
        config: CragConfig | None = None,
        shadow_grading: bool = False,
    ) -> AskResult:
        """Answer one question; the result carries the answer, path, audit trail and usage.

        Parameters
        ----------
        query
            The question: a non-empty ``str`` of valid text. Anything else raises ``TypeError`` or
            ``InvalidQuestionError`` (a ``ValueError``) before any model call.
        history
            Earlier turns, ``[{"role": "user" | "assistant", "content": ...}]``; default none.
        mode
            ``"knowledge_base"`` (the corrective graph), ``"normal"`` (the model alone) or
            ``"naive_rag"`` (top-k vector_search, no grading).
        config
            Another config for this question only; default the lab's.
        shadow_grading
            Also grade the rounds the pre-filter skipped and record those grades for replay
            (``state["rounds"][k]["shadow"]``); they decide nothing and are not counted as calls.
        """
        result, started_ns = self._answer(query, history, mode, config=config, shadow_grading=shadow_grading)
        if self.traces is not None:
            self.traces.emit(result.to_record(), started_ns, config or self.config)
        return result

    def _answer(self, query: str, history: list[dict[str, str]] | None, mode: Mode, *, config: CragConfig | None,
                shadow_grading: bool) -> tuple[AskResult, int]:
        """`ask`'s answer, and when it started (ns since the epoch, for its trace)."""
        started_ns = time.time_ns()
        query = check_question(query)
        history = check_history(history)
        mode = self._check_mode(mode)
        config = config or self.config
        graph = self.graph(mode, config, shadow_grading=shadow_grading)
        start = time.perf_counter()
        last = start
        node_ms: list[tuple[str, float]] = []
        state: AgentState = {}
        # stream_mode="updates" names the node behind each update: per-node wall time for free.
        for kind, chunk in graph.stream(
            initial_state(query, mode=mode, history=history, top_k=config.top_k),
            {"recursion_limit": config.recursion_limit},
            stream_mode=["updates", "values"],
        ):
            if kind == "updates":
                now = time.perf_counter()
                node_ms.extend((node, (now - last) * 1000) for node in chunk)
                last = now
            elif isinstance(chunk, dict):  # "values": the whole state after each step
                state = cast(AgentState, dict(chunk))
        return AskResult(query, mode, state["answer"], state, (time.perf_counter() - start) * 1000,
                         tuple(node_ms)), started_ns

    def run(
        self,
        queries: Iterable[str | Mapping[str, Any]],
        *,
        config: CragConfig | None = None,
        mode: Mode = "knowledge_base",
        shadow_grading: bool = True,
        progress: bool = False,
        concurrency: int = 1,
        journal: str | Path | None = None,
        executor: Executor | str | None = None,
    ) -> Experiment:
        """Run a query set and record everything replay and the dashboard need.

        Parameters
        ----------
        queries
            Strings, or dicts with ``question`` (and ``id`` and labels such as ``gold``, as in
            ``data/kb_queries.jsonl``); every question is checked before anything runs
            (`crag_lab.records.query_rows`), and two questions with one id are refused
            (`crag_lab.errors.DuplicateIdError`, naming the ids).
        config
            The config to run at; default the lab's. It is recorded with the experiment.
        mode
            The graph mode, as in `ask`.
        shadow_grading
            The grader also scores rounds the pre-filter skipped, kept apart from the run's own
            calls, so that replay can tell what would happen if a rule stopped firing.
        progress
            Show a tqdm progress bar.
        concurrency
            Questions in flight at once (threads; for a model server, its parallel slots).
        journal
            A JSONL file each finished question is written to at once (`crag_lab.journal`): run
            again with the same journal after an interruption and only the questions it lacks are
            asked. A journal answer is reused only for the same id and question text: a question
            edited under its id is asked again, with a warning naming it. With a journal, a
            question whose model calls all fail (a dead server) stops the run with
            `crag_lab.journal.ModelUnavailableError` instead of recording a degraded answer.
        executor
            None (this process) or where else to answer: ``"ray"`` (a local Ray, or the cluster in
            ``RAY_ADDRESS``), a Ray address such as ``"ray://head:10001"``, or a
            `crag_lab.ray_executor.RayExecutor`, which shards the questions over workers that each
            rebuild this lab once; the records are the same and in the same order. Needs a lab made
            by `from_directory`.
        """
        from crag_lab.journal import RunJournal, run_rows, threaded

        config = config or self.config
        rows = query_rows(queries)
        started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        ident = model_identity(self.model)
        endpoint = str(ident.pop("api_base", None) or self.model.name)  # a restarted server may move ports
        book = RunJournal(journal, config=config, mode=mode, model=ident) if journal is not None else None
        bar = None
        if progress:
            from tqdm.auto import tqdm

            reused = sum(book.find(r["id"], r["question"]) is not None for r in rows) if book is not None else 0
            bar = tqdm(total=len(rows), initial=reused, desc="queries", unit="q")

        def answer(row: QueryRow) -> QueryRecord:
            return self.record(row, config=config, mode=mode, shadow_grading=shadow_grading)

        many = None
        if executor is not None:
            from crag_lab.ray_executor import resolve_executor

            many = resolve_executor(executor).answer_many(self, config=config, mode=mode, shadow_grading=shadow_grading)
        try:
            with _model_activity(bar, self.model):
                records = run_rows(rows, answer, concurrency=concurrency, journal=book, endpoint=endpoint,
                                   answer_many=_counted(many or threaded(answer, concurrency), bar),
                                   alive=getattr(self.model, "server_alive", None) if many is None else None)
        finally:
            if bar is not None:
                bar.close()
            if self.traces is not None:
                self.traces.flush()
        return Experiment(config, records, {"model": self.model.name, "mode": mode, "shadow_grading": shadow_grading,
                                            "tools": list(self.tools), "started_at": started_at})

    def record(self, row: QueryRow, *, config: CragConfig | None = None, mode: Mode = "knowledge_base",
               shadow_grading: bool = True) -> QueryRecord:
        """Answer one row of a query set (`crag_lab.records.query_rows`) as the record `run` keeps."""
        result, started_ns = self._answer(row["question"], None, mode, config=config, shadow_grading=shadow_grading)
        record = result.to_record(row["id"], labels=row["labels"])
        if self.traces is not None:
            self.traces.emit(record, started_ns, config or self.config)
        return record

    def rerun(self, query: str, config: CragConfig | Mapping[str, Any]) -> AskResult:
        """Run the real graph for one query at another config (what replay cannot know)."""
        query = check_question(query)
        if isinstance(config, Mapping):
            config = self.config.with_changes(**config)
        if not isinstance(config, CragConfig):
            raise TypeError(f"config must be a CragConfig or a mapping of its fields, got {type(config).__name__}")
        return self.ask(query, config=config)

    def ask_many(
        self,
        queries: Iterable[str],
        mode: Mode = "knowledge_base",
        *,
        config: CragConfig | None = None,
        concurrency: int = 4,
    ) -> list[AskResult]:
        """Answer many questions with ``graph.batch`` (explicit recursion limit and concurrency).

        Traced like `ask` when the lab traces (one trace per question, all starting when the batch did;
        ``graph.batch`` times no node, so node spans are timed by their model calls).
        """
        queries = check_questions(queries)
        mode = self._check_mode(mode)
        config = config or self.config
        started_ns = time.time_ns()
        start = time.perf_counter()
        states = self.graph(mode, config).batch(
            [initial_state(q, mode=mode, top_k=config.top_k) for q in queries],
            {"recursion_limit": config.recursion_limit, "max_concurrency": concurrency},
        )
        per_query = (time.perf_counter() - start) * 1000 / max(len(queries), 1)
        results = [AskResult(q, mode, s["answer"], cast(AgentState, dict(s)), per_query)
                   for q, s in zip(queries, states, strict=True)]
        if self.traces is not None:
            for result in results:
                self.traces.emit(result.to_record(), started_ns, config)
            self.traces.flush()
        return results

    def prepare(self) -> int:
        """Encode every chunk's sentences for the offline model now, so first questions run at warm speed.

        The offline model keeps what it encodes in the index folder, so this pays once per
        knowledge base (about 50 s for the bundled one on two cores), not once per session. A real
        LLM needs nothing: returns 0, as when everything was already encoded; else how many texts
        were encoded.
        """
        from crag_lab.offline import OfflineModel

        model = getattr(self.model, "model", self.model)  # under a response cache
        if isinstance(model, TaskModels):  # a model per task: the offline default answers the rest
            model = model.default
        return model.prepare() if isinstance(model, OfflineModel) else 0

    def mermaid(self, mode: Mode = "knowledge_base", highlight: Sequence[str] | None = None) -> str:
        """The graph as Mermaid text (rendered offline by JupyterLab), optionally with a path highlighted."""
        from crag_lab.drawing import mermaid

        return mermaid(self.graph(mode), highlight=highlight)

    def dashboard(self, exp: Experiment) -> Dashboard:
        """The threshold explorer over a recorded experiment (sliders replay it; no model calls)."""
        from crag_lab.dashboard import Dashboard

        return Dashboard(self, exp)

    def __repr__(self) -> str:
        kb = f"kb={str(self.kb.root)!r}, " if self.kb is not None else ""
        return f"Lab({kb}model={self.model.name!r}, tools={list(self.tools)}, config={self.config!r})"


@dataclass(frozen=True)
class LabRecipe:
    """The arguments `Lab.from_directory` was given: calling it builds the same lab again.

    Picklable, so a worker process (a Ray actor) can rebuild the lab it answers for: it reloads
    the persisted index of the same folder (embedding nothing when no file changed).
    """

    kb: str
    config: CragConfig
    llm: Any = None
    cache_dir: str | None = None
    remote: bool = True
    cache: str | None = None
    vector_store: VectorStoreConfig | None = None

    def __call__(self) -> Lab:
        return Lab.from_directory(self.kb, config=self.config, llm=self.llm, cache_dir=self.cache_dir,
                                  remote=self.remote, cache=self.cache, vector_store=self.vector_store)


def _live_traces(provider: Any | None, model: str) -> LiveTraces | None:
    """Live traces to ``provider``, else to ``CRAG_OTEL_ENDPOINT`` when it is set, else None (nothing imported)."""
    if provider is None:
        from crag_lab.config import TraceSettings

        settings = TraceSettings()
        if settings.otel_endpoint is None:
            return None
        from crag_lab.traces import LiveTraces

        return LiveTraces.to_endpoint(settings.otel_endpoint, model=model, project=settings.otel_project)
    from crag_lab.traces import LiveTraces

    return LiveTraces(provider, model=model)


@contextmanager
def _model_activity(bar: Any, model: Any, every_s: float = 2.0) -> Iterator[None]:
    """While the block runs, the model's progress line (`crag_lab.models.LlamaIndexModel.activity`: calls,
    tokens/s, calls running) beside the bar, every ``every_s``: a slow server shows it is working."""
    line = getattr(model, "activity", None)
    if bar is None or not callable(line):
        yield
        return
    done = threading.Event()

    def tick() -> None:
        while not done.wait(every_s):
            bar.set_postfix_str(line(), refresh=True)

    thread = threading.Thread(target=tick, daemon=True, name="crag-progress")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=every_s + 1)
        bar.set_postfix_str(line(), refresh=False)


def _counted(many: AnswerMany, bar: Any) -> AnswerMany:
    """``many``, moving a progress bar on by one for each record (no bar: ``many`` itself)."""
    if bar is None:
        return many

    def counted(todo: Sequence[QueryRow], stop: Callable[[], bool]) -> Iterator[QueryRecord]:
        for record in many(todo, stop):
            bar.update(1)
            yield record

    return counted

