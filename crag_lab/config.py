"""One settings model for the whole agent: arguments > environment > `.env` > defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import SettingsConfigDict
from typing_extensions import Self

from crag_lab._env import EnvFileSettings, url_problem

Grading = Literal["batch", "per_item"]


def steps_needed(max_iterations: int) -> int:
    """Graph steps of the longest run: every round a RE_RETRIEVE (analyze, plan, tool_exec, grade), then synthesize."""
    return 4 * max_iterations + 1


def _derived_recursion_limit(max_iterations: int) -> int:
    """The recursion limit used unless one is given: room for the longest run, and at least 100."""
    return max(100, steps_needed(max_iterations) + 10)


Aggregator = Literal["mean", "max", "any_above"]


class CragConfig(EnvFileSettings):
    """Thresholds and limits of the corrective-RAG loop.

    Values are stored as given; nothing expensive happens here. A slider change in the lab makes a
    new value with ``config.with_changes(...)``, ``config.model_copy(update={...})`` or
    ``CragConfig(**{...})``: all three validate, and an invalid value raises the same
    ``ValidationError`` naming the field.

    >>> CragConfig(relevance_floor=0.25).generate_threshold
    0.7
    """

    model_config = SettingsConfigDict(
        env_prefix="KB_AGENT_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        validate_default=True,
    )

    relevance_floor: float = Field(0.3, ge=0.0, le=1.0, description="Items graded below this are dropped.")
    generate_threshold: float = Field(
        0.7, ge=0.0, le=1.0, description="Aggregate score at or above which the agent answers (GENERATE)."
    )
    vector_score_threshold: float = Field(
        0.8,
        ge=-1.0,
        le=1.0,
        description="Pre-filter: all items from vector_search with cosine at or above this skip the grader.",
    )
    auto_approve_max_items: int = Field(
        2, ge=0, le=1000, description="Pre-filter: this many context items or fewer skip the grader."
    )
    max_iterations: int = Field(3, ge=1, le=50, description="Grading rounds before synthesize is forced.")
    top_k: int = Field(5, ge=1, le=100, description="Items each search tool returns.")
    grading: Grading = Field("batch", description="'batch': one grader call per round; 'per_item': one per item.")
    aggregator: Aggregator = Field(
        "mean", description="How surviving scores become one number: 'mean' (spec), 'max', 'any_above'."
    )
    routing: bool = Field(
        True, description="False: every question takes the full graded pipeline (no chitchat/simple fast paths)."
    )
    prefilter: bool = Field(True, description="False: the pre-filter rules never skip the grader.")
    model_retries: int = Field(2, ge=0, le=10, description="Retries after a model exception or timeout.")
    model_timeout_s: float = Field(60.0, gt=0.0, le=3600.0, description="Seconds before a model call times out "
                                   "(not the offline model's: it runs on the caller's thread).")
    retry_backoff_s: float = Field(0.5, ge=0.0, le=60.0, description="First retry delay; doubles each retry.")
    recursion_limit: int = Field(
        100,
        ge=10,
        le=10_000,
        description="Passed to every LangGraph invoke/batch; by default max(100, 4 * max_iterations + 10).",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_recursion_limit(cls, data: Any) -> Any:
        """Unless given, the recursion limit grows with max_iterations, so the iteration counter,
        not LangGraph's limit, is what ends a long loop (each RE_RETRIEVE round is 4 steps)."""
        if isinstance(data, dict) and data.get("recursion_limit") is None:
            try:
                rounds = int(data.get("max_iterations", 3))
            except (TypeError, ValueError):
                return data  # the field validator reports the bad max_iterations
            data = {**data, "recursion_limit": _derived_recursion_limit(rounds)}
        return data

    @model_validator(mode="after")
    def _floor_below_generate(self) -> CragConfig:
        if self.relevance_floor > self.generate_threshold:
            raise ValueError(
                f"relevance_floor ({self.relevance_floor}) must be <= generate_threshold "
                f"({self.generate_threshold}): an item kept at the floor could never make GENERATE possible"
            )
        if self.recursion_limit < steps_needed(self.max_iterations):
            raise ValueError(
                f"recursion_limit ({self.recursion_limit}) is below the {steps_needed(self.max_iterations)} "
                f"graph steps that max_iterations={self.max_iterations} can take; raise recursion_limit or leave "
                "it unset"
            )
        return self

    def with_changes(self, **changes: Any) -> Self:
        """A validated copy with ``changes`` applied.

        An invalid value, or a name that is not a field, raises the ``ValidationError`` the
        constructor raises, naming the field; so a slider cannot build an invalid config. A
        recursion limit that was derived from ``max_iterations`` is derived again; one that was
        set stays (and must still fit the new ``max_iterations``).

        >>> CragConfig().with_changes(max_iterations=40).recursion_limit
        171
        >>> CragConfig(recursion_limit=500).with_changes(top_k=3).recursion_limit
        500
        """
        unknown = [name for name in changes if name not in type(self).model_fields]
        if unknown:
            valid = ", ".join(type(self).model_fields)
            raise ValidationError.from_exception_data(type(self).__name__, [
                {"type": PydanticCustomError("unknown_setting", "not a setting; valid ones are: {valid}",
                                             {"valid": valid}),
                 "loc": (name,), "input": changes[name]}
                for name in unknown
            ])
        derived = self.recursion_limit == _derived_recursion_limit(self.max_iterations)
        return type(self)(**(self.model_dump(exclude={"recursion_limit"} if derived else set()) | changes))

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with ``update``, a validated one, exactly as ``with_changes(**update)``.

        Pydantic's own ``model_copy(update=...)`` skips validation: a floor above the generate
        threshold or ``max_iterations=-5`` would run. Here it raises the constructor's
        ``ValidationError``. (``copy.replace(config, ...)`` goes through this too.)

        >>> CragConfig().model_copy(update={"max_iterations": -5})
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for CragConfig
        max_iterations
          Input should be greater than or equal to 1 ...
        """
        if not update:
            return super().model_copy(deep=deep)
        return self.with_changes(**update)

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> Self:  # type: ignore[override]
        """Validated, unlike pydantic's: the same as ``CragConfig.model_validate(values)`` (no environment)."""
        return cls.model_validate(values)

    def thresholds(self) -> dict[str, float | int]:
        """The values a grading decision depends on, as recorded with every round."""
        return {
            "relevance_floor": self.relevance_floor,
            "generate_threshold": self.generate_threshold,
            "vector_score_threshold": self.vector_score_threshold,
            "auto_approve_max_items": self.auto_approve_max_items,
            "max_iterations": self.max_iterations,
        }


VectorStoreKind = Literal["faiss", "qdrant"]


class VectorStoreConfig(EnvFileSettings):
    """Where a knowledge base keeps its chunk vectors: arguments > environment (``CRAG_``) > `.env` > defaults.

    ``faiss`` (the default) is a flat FAISS file in the index folder: one process, the corpus in
    memory. ``qdrant`` is a Qdrant collection through LlamaIndex's ``QdrantVectorStore``: a server
    or cluster at ``qdrant_url`` (``CRAG_QDRANT_URL``), else Qdrant's embedded local mode in
    ``qdrant_path`` (default ``<index folder>/qdrant``; ``":memory:"`` keeps it in this process).
    Both score by cosine over the same unit vectors. Kept apart from `CragConfig`: where vectors
    live changes no decision, so it is not recorded with experiments.

    >>> VectorStoreConfig(vector_store="qdrant", qdrant_url="http://127.0.0.1:6333").collection_prefix
    'crag'
    """

    model_config = SettingsConfigDict(env_prefix="CRAG_", env_file=".env", env_file_encoding="utf-8",
                                      extra="ignore", frozen=True)

    vector_store: VectorStoreKind = Field("faiss", description="'faiss' (in the index folder) or 'qdrant'.")
    qdrant_url: str | None = Field(None, description="A Qdrant server or cluster, e.g. http://qdrant:6333.")
    qdrant_path: str | None = Field(
        None, description="Embedded local Qdrant folder (default <index folder>/qdrant), or ':memory:'.")
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server, if it needs one.")
    collection_prefix: str = Field("crag", pattern=r"^[A-Za-z0-9_-]{1,40}$",
                                   description="Collections are named <prefix>-<index folder id>.")

    @field_validator("qdrant_url")
    @classmethod
    def _server_url(cls, value: str | None) -> str | None:
        """A server URL with a valid host and port (``localhost:6333`` as Qdrant's client reads it: http)."""
        if value is not None:
            problem = url_problem(value if "://" in value else f"http://{value}")
            if problem is not None:
                raise ValueError(f"{problem}; give the server's URL, e.g. http://127.0.0.1:6333")
        return value


class TraceSettings(EnvFileSettings):
    """Where `crag_lab.Lab` sends live traces: arguments > environment (``CRAG_``) > `.env` > defaults.

    ``otel_endpoint`` (``CRAG_OTEL_ENDPOINT``) is an OTLP/HTTP endpoint such as Phoenix's
    ``http://127.0.0.1:6006/v1/traces``; unset (the default), nothing is traced and nothing of
    OpenTelemetry is imported. Kept apart from `CragConfig`: tracing changes no decision.

    >>> TraceSettings(otel_endpoint="http://127.0.0.1:6006/v1/traces").otel_project
    'crag_lab'
    """

    model_config = SettingsConfigDict(env_prefix="CRAG_", env_file=".env", env_file_encoding="utf-8",
                                      extra="ignore", frozen=True)

    otel_endpoint: str | None = Field(None, description="Send each run's traces to this OTLP/HTTP endpoint.")
    otel_project: str = Field("crag_lab", min_length=1, max_length=200,
                              description="The project the traces are filed under (Phoenix's projects).")

    @field_validator("otel_endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is not None:
            problem = url_problem(value)
            if problem is not None:
                raise ValueError(f"{problem}; give an OTLP/HTTP endpoint, e.g. http://127.0.0.1:6006/v1/traces")
        return value


OfflineRouter = Literal["rules", "learned"]
"""The offline routers by name: ``learned`` (a classifier trained on public data, the default) and ``rules``."""


OfflineReader = Literal["rules", "learned"]
"""The offline readers by name: ``rules`` (the synthesizer's support score, the default) and ``learned``
(its ranking re-ordered by the trained answer scorer; the rules' support still decides when to abstain)."""


OfflineLead = Literal["spans", "rules"]
"""Whether the trained span reader helps the offline synthesizer, by name: ``spans`` (its answer
inside the first quote as the bold lead, the default; see ``span_first`` for more) or ``rules``
(no span reader: the bold lead is the one thing of the asked kind the quote holds)."""


class OfflineSettings(EnvFileSettings):
    """How the offline model decides: arguments > environment (``CRAG_OFFLINE_``) > `.env` > defaults.

    ``router`` (``CRAG_OFFLINE_ROUTER``) picks the offline router: ``learned`` (a classifier trained
    on public chit-chat and question sets, `crag_lab.learned.LearnedRouter`, the default) or ``rules``
    (phrase rules and prototypes); ``reader`` (``CRAG_OFFLINE_READER``) the synthesizer's
    reader: ``rules`` (the default) or ``learned`` (`crag_lab.learned.AnswerScorer` re-ranks the top
    units; the rules still decide when to abstain); ``lead`` (``CRAG_OFFLINE_LEAD``) whether the trained
    span reader (`crag_lab.learned.SpanReader`) helps: ``spans`` (its answer in the first quote as the
    bold lead; the default) or ``rules`` (the asked kind of thing the
    quote holds leads); ``span_first`` (``CRAG_OFFLINE_SPAN_FIRST``, on by default; ``0`` turns it off)
    also quotes first the unit holding the span reader's confident best span over all the evidence;
    ``spelling`` (``CRAG_OFFLINE_SPELLING``, on by default; ``0`` turns it off) reads a question's
    misspelt words as the knowledge base spells them (`crag_lab.offline.spelling`); ``doubt``
    (``CRAG_OFFLINE_DOUBT``, off by default; ``1`` turns it on) also abstains when the doubt reader
    finds no answer to a one-fact question quoted from prose (`crag_lab.offline.doubt`).
    Kept apart from `CragConfig`: it is part of which model answers (its cache identity), not a
    threshold of the loop.

    >>> OfflineSettings(router="rules").router
    'rules'
    """

    model_config = SettingsConfigDict(env_prefix="CRAG_OFFLINE_", env_file=".env", env_file_encoding="utf-8",
                                      extra="ignore", frozen=True)

    router: OfflineRouter = Field(
        "learned", description="'learned' (a trained classifier) or 'rules' (phrase rules and prototypes).")
    reader: OfflineReader = Field(
        "rules", description="'rules' (the synthesizer's support score) or 'learned' (the trained answer scorer "
                             "re-ranks the top units; the rules still decide when to abstain).")
    span_first: bool = Field(
        True, description="with lead='spans': quote first the unit holding the span reader's confident best span "
                          "over all the evidence (it reads each item's best units, about 12 ms an item on two CPU "
                          "cores); 0 turns it off.")
    spelling: bool = Field(
        True, description="read a word of the question that is neither in the knowledge base nor in English as the "
                          "knowledge base's nearest word (one edit away, two for 8+ letters); 0 turns it off.")
    doubt: bool = Field(
        False, description="also abstain when the doubt reader (a span reader trained with written unanswerable "
                           "questions) finds no answer to a one-fact question quoted from prose "
                           "(crag_lab.offline.doubt); opt-in: 1 turns it on.")
    lead: OfflineLead = Field(
        "spans", description="'spans' (the trained span reader picks the answer's exact words in the first quote) "
                             "or 'rules' (no span reader: the asked kind of thing the quote holds leads).")
