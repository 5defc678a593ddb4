"""A model per task (crag_lab.models.TaskModels): a real reader beside the offline router, planner and grader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _experiments import items

from crag_lab import CragConfig, Lab
from crag_lab.cache import CachedModel, ResponseCache, cache_identity
from crag_lab.cli import main as cli_main
from crag_lab.models import LlamaIndexModel, TaskModels, as_model
from crag_lab.offline import OfflineModel
from crag_lab.servers import openai_compatible
from crag_lab.testing import ScriptedLLM, StaticTool

GATEWAY = [{"text": "The api-gateway accepts public TLS traffic on port 8443.", "path": "gateway.md", "line": 1,
            "line_end": 1, "score": 0.7}]


def test_only_the_named_task_reaches_the_given_model_and_the_offline_model_answers_the_rest() -> None:
    reader = ScriptedLLM({"synthesize": "Port 8443 [1]."})
    lab = Lab([StaticTool("vector_search", GATEWAY)], llm={"synthesize": reader}, config=CragConfig(model_retries=0))
    result = lab.ask("On which port does the api-gateway accept public TLS traffic?")
    assert [c["task"] for c in reader.calls] == ["synthesize"]  # analyze and plan never reached it
    assert result.answer.startswith("Port 8443 [1].")
    assert {u["task"] for u in result.usage} >= {"analyze", "plan", "synthesize"}
    assert "8443" in reader.calls[0]["prompt"]  # the reader read the evidence the offline plan retrieved
    assert isinstance(lab.model, TaskModels) and isinstance(lab.model.default, OfflineModel)


def test_prepare_reaches_the_offline_model_of_a_line_up(make_kb: Callable[..., Path]) -> None:
    kb = make_kb({"gw.md": "# Gateway\n\nThe gateway listens on port 8443. The Edge team runs it.\n"})
    lab = Lab.from_directory(kb, llm={"synthesize": ScriptedLLM({"synthesize": "8443 [1]."})}, remote=False,
                             cache=kb.parent / "responses.sqlite")  # a line-up behind a response cache
    assert lab.prepare() > 0 and lab.prepare() == 0  # the offline part's sentences, encoded once


def test_a_task_mapped_to_none_or_left_out_shares_one_offline_model() -> None:
    made: list[ScriptedLLM] = []

    def offline() -> ScriptedLLM:
        made.append(ScriptedLLM({"analyze": "{}"}))
        return made[-1]

    model = as_model({"grade": None, "synthesize": ScriptedLLM({"synthesize": "x"})}, offline_factory=offline)
    assert isinstance(model, TaskModels) and len(made) == 1
    assert model.model_for("grade") is model.default is model.model_for("plan") is made[0]
    assert model.name == "scripted + grade: scripted + synthesize: scripted"


def test_an_unknown_task_is_refused_naming_the_tasks() -> None:
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['summarize'\]; tasks are \['analyze'"):
        Lab([StaticTool("vector_search", items(2))], llm={"summarize": ScriptedLLM({})})


def server_model(url: str) -> LlamaIndexModel:
    return LlamaIndexModel(openai_compatible(url, "m", chat=False, check=False))


def test_the_cache_keys_on_the_line_up_not_on_the_servers_port(tmp_path: Path) -> None:
    offline = ScriptedLLM({})
    reader_a = TaskModels({"synthesize": server_model("http://127.0.0.1:8080/v1")}, offline)
    reader_b = TaskModels({"synthesize": server_model("http://127.0.0.1:9090/v1")}, offline)
    grader = TaskModels({"grade": server_model("http://127.0.0.1:8080/v1")}, offline)
    assert cache_identity(reader_a) == cache_identity(reader_b)  # the same model behind another port
    assert cache_identity(reader_a) != cache_identity(grader)  # another task on the server: other replies
    assert reader_a.cache_identity()["api_base"] == "http://127.0.0.1:8080/v1"  # kept for messages
    cached = CachedModel(reader_a, ResponseCache(tmp_path / "r.sqlite"))
    assert cached.cache_identity()["api_base"] == "http://127.0.0.1:8080/v1"


def test_eval_refuses_server_tasks_without_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="give the server with --api-base"):
        cli_main(["eval", "--dataset", "data/kb_queries.jsonl", "--server-tasks", "synthesize", "--no-progress"])
