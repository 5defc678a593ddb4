"""Structured outputs (crag_lab/schemas.py, LlamaIndexModel): schema-constrained JSON where supported."""

from __future__ import annotations

import json
from typing import Any

import pytest
from llama_index.core.base.llms.types import CompletionResponse
from llama_index.llms.openai_like import OpenAILike

from crag_lab.models import LlamaIndexModel, supports_response_format
from crag_lab.parsing import parse_analysis, parse_grades, parse_plan
from crag_lab.schemas import analyze_schema, grade_schema, plan_schema, task_schema

TOOLS = ["vector_search", "keyword_search"]


class RecordingOpenAILike(OpenAILike):
    """OpenAILike whose transport is replaced: it records the request options and answers ``reply``."""

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        sent = self.additional_kwargs.setdefault("_sent", [])
        sent.append(kwargs)
        if "response_format" in kwargs and self.additional_kwargs.get("_reject"):
            err = RuntimeError("400: response_format is not supported")
            err.status_code = 400  # type: ignore[attr-defined]
            raise err
        return CompletionResponse(text='{"scores": [0.9, 0.1]}')


def recording(reject: bool = False, chat: bool = True) -> RecordingOpenAILike:
    return RecordingOpenAILike(model="m", api_base="http://127.0.0.1:9/v1", api_key="x", is_chat_model=chat,
                               additional_kwargs={"_reject": reject})


def test_replies_that_follow_each_schema_parse() -> None:
    analysis = {"query_type": "fact", "complexity": "simple", "sub_questions": ["q"], "suggested_tools": TOOLS[:1],
                "grep_keywords": ["8443"]}
    assert parse_analysis(json.dumps(analysis), TOOLS)["complexity"] == "simple"
    plan = {"calls": [{"tool": "keyword_search", "args": {"query": "port"}}]}
    assert parse_plan(json.dumps(plan), TOOLS) == plan["calls"]
    assert parse_grades(json.dumps({"scores": [0.2, 1]}), 2) == [0.2, 1.0]


def test_schemas_pin_what_the_parsers_need() -> None:
    assert analyze_schema(TOOLS)["properties"]["suggested_tools"]["items"]["enum"] == TOOLS
    assert set(analyze_schema(TOOLS)["properties"]["complexity"]["enum"]) == {"chitchat", "simple", "complex"}
    assert plan_schema(TOOLS)["properties"]["calls"]["minItems"] == 1
    score = grade_schema(3)["properties"]["scores"]
    assert (score["minItems"], score["maxItems"]) == (3, 3)
    assert min(score["items"]["enum"]) == 0.0 and max(score["items"]["enum"]) == 1.0
    assert task_schema("plan", {"available_tools": TOOLS}) == plan_schema(TOOLS)
    assert all(s["type"] == "object" for s in (analyze_schema(TOOLS), plan_schema(TOOLS), grade_schema(1)))


def test_an_openai_compatible_llm_is_asked_for_schema_constrained_json() -> None:
    llm = recording()
    assert supports_response_format(llm)
    model = LlamaIndexModel(llm)
    model.complete("grade", "Grade these", {"items": [{}, {}]})
    model.complete("synthesize", "Answer", {})
    first, second = llm.additional_kwargs["_sent"]
    assert first["response_format"]["type"] == "json_schema"
    assert first["response_format"]["json_schema"]["schema"] == grade_schema(2)
    assert "response_format" not in second  # synthesis is free text


def test_a_base_model_on_the_completions_endpoint_gets_llama_cpps_json_schema_field() -> None:
    llm = recording(chat=False)
    LlamaIndexModel(llm).complete("plan", "Plan", {"available_tools": TOOLS})
    assert llm.additional_kwargs["_sent"][0] == {"extra_body": {"json_schema": plan_schema(TOOLS)}}


def test_a_provider_that_rejects_schemas_falls_back_to_free_text_once_and_for_all() -> None:
    llm = recording(reject=True)
    model = LlamaIndexModel(llm)
    assert model.complete("grade", "Grade", {"items": [{}, {}]}).text == '{"scores": [0.9, 0.1]}'
    assert model.schema_rejected and "response_format" in model.schema_rejected
    model.complete("grade", "Grade", {"items": [{}, {}]})
    assert [("response_format" in k) for k in llm.additional_kwargs["_sent"]] == [True, False, False]


def test_always_never_falls_back_and_never_never_asks() -> None:
    with pytest.raises(RuntimeError, match="400"):
        LlamaIndexModel(recording(reject=True), structured="always").complete("grade", "G", {"items": [{}]})
    llm = recording()
    LlamaIndexModel(llm, structured="never").complete("grade", "G", {"items": [{}]})
    assert "response_format" not in llm.additional_kwargs["_sent"][0]
    with pytest.raises(ValueError, match="structured must be"):
        LlamaIndexModel(llm, structured="sometimes")  # type: ignore[arg-type]


def test_a_cache_keys_on_the_schemas_so_a_changed_schema_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import crag_lab.schemas as schemas
    from crag_lab.cache import cache_identity

    before = cache_identity(LlamaIndexModel(recording()))
    assert before["schemas"] == schemas.fingerprint()
    assert cache_identity(LlamaIndexModel(recording(), structured="never"))["schemas"] is False
    monkeypatch.setattr(schemas, "MAX_LIST", schemas.MAX_LIST + 1)
    assert cache_identity(LlamaIndexModel(recording()))["schemas"] != before["schemas"]
