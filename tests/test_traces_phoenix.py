"""The bundled KB recording in a real Phoenix: sent over OTLP, read back through Phoenix's REST API, seen in its UI.

Phoenix runs from its own environment (``.venv-phoenix``, made by ``make test``; its pins clash with
this package's), on 127.0.0.1 with free ports and its database in a temporary folder, and is stopped
by its PID. Without it these tests skip, saying how to get it, except under ``make test`` (which
sets ``CRAG_LAB_PHOENIX``) or ``CI=true``, where they fail. ``make test PHOENIX=skip`` skips them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_notebooks_browser import CHROMIUM, CHROMIUM_ARGS, free_port, require_chromium, wait_for_port

from crag_lab.cli import main
from crag_lab.records import QueryRecord
from crag_lab.replay import Experiment

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "notebooks" / "recordings" / "kb_knowledge_base.jsonl"
ARTIFACTS = ROOT / "tests" / "artifacts"
PHOENIX = ROOT / ".venv-phoenix" / "bin" / "phoenix"
SHOWN = "a013"  # a complex question: three graded rounds, capped


def phoenix_executable() -> Path:
    """The ``phoenix`` command: ``CRAG_LAB_PHOENIX``, else the checkout's ``.venv-phoenix``; skip or fail without it."""
    given = os.environ.get("CRAG_LAB_PHOENIX")
    if given == "skip":
        pytest.skip("Phoenix tests skipped by PHOENIX=skip (make test PHOENIX=skip)")
    path = Path(given) if given else PHOENIX
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = (f"no Phoenix at {path}: `make test` makes .venv-phoenix (python3 -m venv .venv-phoenix && "
               ".venv-phoenix/bin/pip install arize-phoenix; not into .venv, whose pins it would change)")
    if given or os.environ.get("CI") == "true":
        pytest.fail(message + " (required under make test and CI=true)")
    pytest.skip(message)


@dataclass
class Phoenix:
    url: str
    log: Path

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return json.load(response)

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of a project, through Phoenix's REST API, page by page."""
        found: list[dict[str, Any]] = []
        cursor = ""
        while True:
            page = self.get(f"/v1/projects/{project}/spans?limit=1000{cursor}")
            found += page["data"]
            if not page.get("next_cursor"):
                return found
            cursor = f"&cursor={page['next_cursor']}"


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    """Phoenix on 127.0.0.1 (free ports, a temporary database), stopped by its PID when the module's tests end."""
    executable = phoenix_executable()
    tmp = tmp_path_factory.mktemp("phoenix")
    port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))} | {
        "PHOENIX_WORKING_DIR": str(tmp), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = tmp / "phoenix.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen([str(executable), "serve"], cwd=tmp, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, log, timeout_s=180, name="phoenix")
        served = Phoenix(f"http://127.0.0.1:{port}", log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the port opens before the API answers
            try:
                served.get("/v1/projects")
                break
            except OSError:
                time.sleep(0.5)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass
class Sent:
    exp: Experiment
    spans: list[dict[str, Any]]


@pytest.fixture(scope="module")
def sent(phoenix: Phoenix) -> Sent:
    """The bundled recording, sent with ``crag-lab export-traces --otlp`` and read back once Phoenix has stored it."""
    exp = Experiment.load(RECORDING)
    expected = sum(expected_spans(r) for r in exp.records)
    assert main(["export-traces", str(RECORDING), "--otlp", phoenix.url]) == 0  # filed under the project crag_lab
    deadline = time.monotonic() + 120
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:  # Phoenix stores what it receives in batches, a moment later
        try:
            spans = phoenix.spans("crag_lab")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:  # 404: the project is made with its first stored span
                raise
        if len(spans) >= expected:
            break
        time.sleep(1)
    return Sent(exp, spans)


def expected_spans(rec: QueryRecord) -> int:
    """The question, a span per node step, per model call (shadow grading included) and per tool call."""
    shadow = sum(len((r.get("shadow") or {}).get("usage", [])) for r in rec["rounds"])
    return 1 + len(rec["path"]) + len(rec["usage"]) + shadow + len(rec["tool_history"])


def test_phoenix_stores_one_trace_per_question_with_every_span(sent: Sent) -> None:
    by_trace: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in sent.spans:
        by_trace[span["context"]["trace_id"]].append(span)
    roots = {t: next(s for s in spans if s["parent_id"] is None) for t, spans in by_trace.items()}
    by_question = {root["attributes"]["crag.query_id"]: by_trace[t] for t, root in roots.items()}
    assert sorted(by_question) == sorted(r["id"] for r in sent.exp.records)
    assert {q: len(s) for q, s in by_question.items()} == {r["id"]: expected_spans(r) for r in sent.exp.records}
    # Phoenix reads the OpenInference kinds: a chain per node, retrievers, evaluators, LLM calls.
    assert Counter(s["span_kind"] for s in sent.spans).keys() == {"CHAIN", "RETRIEVER", "EVALUATOR", "LLM"}
    for rec in sent.exp.records:
        spans = by_question[rec["id"]]
        root = next(s for s in spans if s["parent_id"] is None)
        nodes = sorted((s for s in spans if s["parent_id"] == root["context"]["span_id"]), key=lambda s: s["start_time"])
        assert [s["name"] for s in nodes] == rec["path"], rec["id"]
        assert root["attributes"]["crag.route"] and root["attributes"]["input.value"] == rec["query"]


def test_a_grade_reads_back_as_it_was_recorded(sent: Sent) -> None:
    rec = sent.exp.record(SHOWN)
    root = next(s for s in sent.spans if s["parent_id"] is None and s["attributes"]["crag.query_id"] == SHOWN)
    trace = [s for s in sent.spans if s["context"]["trace_id"] == root["context"]["trace_id"]]
    graders = sorted((s for s in trace if s["name"] == "grader"), key=lambda s: s["start_time"])
    first_round = rec["rounds"][0]
    grades = graders[0]["attributes"]
    assert grades["crag.grades.0.id"] == first_round["items"][0]["id"]
    assert grades["crag.grades.0.grade"] == pytest.approx(first_round["items"][0]["grader_score"])
    decisions = sorted((s for s in trace if s["name"] == "grade_evidence"), key=lambda s: s["start_time"])
    assert [d["attributes"]["crag.decision.action"] for d in decisions] == [r["action"] for r in rec["rounds"]]
    assert decisions[0]["attributes"]["crag.thresholds.relevance_floor"] == first_round["thresholds"]["relevance_floor"]
    documents = min((s for s in trace if s["span_kind"] == "RETRIEVER"), key=lambda s: s["start_time"])["attributes"]
    assert documents["retrieval.documents.0.document.id"] == rec["tool_history"][0]["item_ids"][0]


@pytest.mark.browser
def test_phoenix_shows_a_crag_lab_trace_in_chromium(phoenix: Phoenix, sent: Sent) -> None:
    from playwright.sync_api import Route, sync_playwright

    require_chromium()
    project = phoenix.get("/v1/projects/crag_lab")["data"]["id"]
    root = next(s for s in sent.spans if s["parent_id"] is None and s["attributes"]["crag.query_id"] == SHOWN)
    rec = sent.exp.record(SHOWN)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    blocked: list[str] = []

    def local_only(route: Route) -> None:
        if route.request.url.startswith((phoenix.url, "data:", "blob:")):
            route.continue_()
        else:  # Phoenix's page asks for web fonts and its latest version: refused, the page works without them
            blocked.append(route.request.url)
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.route("**/*", local_only)
            page.goto(f"{phoenix.url}/projects/{project}/traces", wait_until="domcontentloaded", timeout=120_000)
            page.get_by_text("crag_knowledge_base").first.wait_for(timeout=120_000)  # the trace list
            page.goto(f"{phoenix.url}/projects/{project}/traces/{root['context']['trace_id']}",
                      wait_until="domcontentloaded", timeout=120_000)
            page.get_by_text(rec["query"]).first.wait_for(timeout=120_000)  # the trace, its question as input
            for node in ("analyze_and_route", "tool_exec", "grade_evidence", "synthesize"):
                assert page.get_by_text(node, exact=True).count() >= 1, node
            page.get_by_text("grade_evidence", exact=True).first.click()
            # Its panel: the round's items with their grades as input, the decision as output.
            first_round = rec["rounds"][0]
            for text in (f'"action": "{first_round["action"]}"', f'"id": "{first_round["items"][0]["id"]}"',
                         f'"grade": {first_round["items"][0]["grader_score"]}'):
                page.wait_for_function("text => document.body.innerText.includes(text)", arg=text, timeout=60_000)
            page.wait_for_timeout(500)
            page.screenshot(path=str(ARTIFACTS / "phoenix_trace.png"))
        finally:
            browser.close()
    assert all(not url.startswith(("http://127.", "http://localhost")) for url in blocked)
