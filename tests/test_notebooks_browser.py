"""The threshold explorer in a real browser: Voilà serves notebook 02, Chromium moves a slider and picks a frontier point.

Needs Debian's Chromium at /usr/bin/chromium (``scripts/ensure_chromium.sh`` installs it as root).
Without it the test skips, except under ``CI=true``, where it fails. Everything stays on 127.0.0.1:
Voilà's kernel runs offline and the page may fetch nothing from another host.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from crag_lab.replay import Experiment

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "02_threshold_explorer.ipynb"
RECORDING = ROOT / "notebooks" / "recordings" / "kb_knowledge_base.jsonl"  # what notebook 02's dashboard shows
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]
# Voilà's lab template links Font Awesome from a CDN; the request is aborted like any other (icons only).
VOILA_TEMPLATE_CDN = "https://cdn.jsdelivr.net/npm/@fortawesome/"
NOTEBOOK_TIMEOUT_S = 420  # the notebook builds (or loads) the index and runs the labelled query set
# Candidate slider moves, tried in order; the first that changes the route counts of the recording is used.
MOVES = [
    *(("generate_threshold", v) for v in (0.55, 0.6, 0.5, 0.65, 0.75, 0.8, 0.9)),
    *(("relevance_floor", v) for v in (0.5, 0.6, 0.2, 0.1)),
    *(("vector_score_threshold", v) for v in (0.6, 0.7, 0.9)),
]


def one_setting_point(exp: Experiment, **change: float) -> dict[str, float]:
    """What the frontier panel shows for the recorded setting with ``change``: a one-setting frontier."""
    config = exp.config.with_changes(**change)
    axes = ("relevance_floor", "generate_threshold", "vector_score_threshold", "auto_approve_max_items",
            "max_iterations")
    front = exp.frontier(**{k: [getattr(config, k)] for k in axes})
    return {k: float(v[0]) for k, v in front.scores().items()}


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    message = (f"no Chromium at {CHROMIUM}: run `scripts/ensure_chromium.sh` as root "
               "(apt-get install -y chromium) to enable the browser tests")
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (required under CI=true)")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 90,
                  name: str = "voila") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"{name} did not listen on 127.0.0.1:{port} within {timeout_s}s; log: {log}")


@dataclass
class Served:
    url: str
    log: Path


@pytest.fixture(scope="module")
def voila(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Voilà serving notebook 02 on 127.0.0.1, an ephemeral port; stopped when the module's tests end."""
    require_chromium()
    tmp = tmp_path_factory.mktemp("voila")
    port = free_port()
    log = tmp / "voila.log"
    env = os.environ | {
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [sys.executable, "-m", "voila", str(NOTEBOOK), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
           "--show_tracebacks=True"]
    yield from serve(cmd, NOTEBOOK.parent, env, port, log)


def serve(cmd: list[str], cwd: Path, env: dict[str, str], port: int, log: Path) -> Iterator[Served]:
    """Run a notebook server (``cmd``) until the fixture ends; stop it by its PID, killing it if it lingers."""
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, log)
        yield Served(f"http://127.0.0.1:{port}/", log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_moving_a_slider_shows_the_replayed_route_counts(voila: Served) -> None:
    from playwright.sync_api import Route, sync_playwright
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    blocked: list[str] = []

    def local_only(route: Route) -> None:
        if route.request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.route("**/*", local_only)
            page.goto(voila.url, timeout=NOTEBOOK_TIMEOUT_S * 1000, wait_until="commit")
            counts = page.locator(".crag-route-counts").first
            try:
                counts.wait_for(state="attached", timeout=NOTEBOOK_TIMEOUT_S * 1000)
            except PlaywrightTimeout:
                page.screenshot(path=str(ARTIFACTS / "voila_timeout.png"), full_page=True)
                pytest.fail("the dashboard never appeared; page text:\n" + page.inner_text("body")[-3000:]
                            + "\nvoila log:\n" + voila.log.read_text(errors="replace")[-3000:])

            exp = Experiment.load(RECORDING)
            shown = json.loads(counts.get_attribute("data-counts") or "{}")
            assert shown == exp.replay(exp.config).route_counts()
            moves = [(n, v) for n, v in MOVES if exp.replay(**{n: v}).route_counts() != shown]
            assert moves, f"none of {MOVES} changes the route counts of {RECORDING.name}; add a move that does"
            name, value = moves[0]
            expected = exp.replay(**{name: value}).route_counts()

            readout = page.locator(f".crag-control-{name} .widget-readout").first
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type(f"{value}")
            page.keyboard.press("Enter")
            page.wait_for_function(
                "([name, value]) => { const el = document.querySelector('.crag-route-counts');"
                " return el && JSON.parse(el.dataset.config)[name] === value; }",
                arg=[name, value], timeout=NOTEBOOK_TIMEOUT_S * 1000)  # the kernel may still run later cells
            counts = page.locator(".crag-route-counts").first
            assert json.loads(counts.get_attribute("data-counts") or "{}") == expected
            assert f"{name}" in (counts.get_attribute("data-config") or "")
            # The frontier panel's star follows the sliders: its point is the replayed one of the new setting.
            point = json.loads(page.locator(".crag-frontier-now").first.get_attribute("data-point") or "{}")
            assert point[name] == value
            expected_point = one_setting_point(exp, **{name: value})
            assert point["calls_per_question"] == pytest.approx(expected_point["calls_per_question"], abs=1e-5)
            assert point["gold_f1"] == pytest.approx(expected_point["gold_f1"], abs=1e-5)
            flipped = [q.id for q in exp.replay(**{name: value}).flipped]
            if flipped:  # picking a flipped query shows its recorded rounds
                page.locator(".crag-flipped select").first.select_option(index=0)
                page.locator(".crag-trace", has_text=f"{flipped[0]}:").first.wait_for(timeout=60_000)
            # Clicking a frontier point (in the list) and the button moves the sliders there.
            pareto = exp.frontier().pareto()
            target = pareto.iloc[len(pareto) // 2]
            page.locator(".crag-frontier-points select").first.select_option(index=len(pareto) // 2)
            page.locator("button.crag-frontier-apply").first.click()
            page.wait_for_function(
                "([floor, gen, vec]) => { const el = document.querySelector('.crag-route-counts');"
                " const c = el && JSON.parse(el.dataset.config);"
                " return c && Math.abs(c.relevance_floor - floor) < 1e-6 && Math.abs(c.generate_threshold - gen) < 1e-6"
                " && Math.abs(c.vector_score_threshold - vec) < 1e-6; }",
                arg=[float(target["relevance_floor"]), float(target["generate_threshold"]),
                     float(target["vector_score_threshold"])], timeout=60_000)
            for control in ("relevance_floor", "generate_threshold", "vector_score_threshold"):
                readout = page.locator(f".crag-control-{control} .widget-readout").first.inner_text()
                assert float(readout) == pytest.approx(float(target[control]), abs=0.005), control
            page.locator(".crag-dashboard").first.screenshot(path=str(ARTIFACTS / "dashboard_voila.png"))
            assert not page.locator(".crag-errors .jp-OutputArea-output").count()
        finally:
            browser.close()
    unexpected = [u for u in blocked if not u.startswith(VOILA_TEMPLATE_CDN)]
    assert not unexpected, f"the page tried to reach other hosts: {unexpected}"
