"""Notebooks 01 and 02 in JupyterLab itself, in Debian's Chromium, as a teacher would open them.

JupyterLab serves notebooks/ on 127.0.0.1 (no token, an ephemeral port, its own settings folder);
Playwright opens each notebook, runs all cells from the Run menu, and checks: no error output, the
dashboard's widgets rendered, a slider move changes the routes table, and at 1024 px (a projector)
no element of the dashboard overflows horizontally. Full-page screenshots at 1280 and 1024 px go to
tests/artifacts/ for review. Chromium as in test_notebooks_browser.py (installed by
scripts/ensure_chromium.sh; required under CI=true).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_notebooks_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    RECORDING,
    Served,
    free_port,
    require_chromium,
    serve,
)

from crag_lab.replay import Experiment

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_MS = 420_000
# Every element of the dashboard whose content is wider than its box (what a scrollbar or a cut-off means).
OVERFLOW_JS = """() => {
  const out = [];
  for (const el of document.querySelectorAll('.crag-dashboard, .crag-dashboard *')) {
    // A slider's handle sits half outside its track at either end: that is the slider, not an overflow.
    if (el.closest('.slider-container')) continue;
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1) {
      const cls = String(el.className).split(' ').filter(c => !c.startsWith('lm-') && !c.startsWith('jupyter-')).join(' ');
      out.push({cls: cls.slice(0, 120), tag: el.tagName, scroll: el.scrollWidth, client: el.clientWidth});
    }
  }
  return out;
}"""
ERRORS_JS = """() => Array.from(document.querySelectorAll('.jp-OutputArea-output'))
  .map(el => el.innerText)
  .filter(t => /Traceback \\(most recent call last\\)|^\\w+Error: /m.test(t))
  .map(t => t.slice(0, 400))"""
BUSY_JS = """() => {
  const prompts = Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell.jp-CodeCell .jp-InputPrompt'));
  return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.innerText));
}"""


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    require_chromium()
    tmp = tmp_path_factory.mktemp("jupyterlab")
    port = free_port()
    log = tmp / "jupyterlab.log"
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                        "JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
                        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           f"--ServerApp.root_dir={ROOT / 'notebooks'}", "--allow-root"]
    # Render every cell (no windowing), so the test can see every prompt and output.
    tracker = tmp / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}), encoding="utf-8")
    news = tmp / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}), encoding="utf-8")  # no pop-up
    yield from serve(cmd, ROOT / "notebooks", env, port, log)


def run_all(page: Any, url: str, notebook: str) -> None:
    """Open ``notebook`` in JupyterLab and run every cell from the Run menu; wait until all have run."""
    page.goto(f"{url}lab/tree/{notebook}?reset", timeout=120_000)  # ?reset: no other notebook restored
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
    page.wait_for_function("() => /Idle/.test(document.querySelector('.jp-StatusBar-Widget')?.closest('#jp-bottom-panel, "
                           ".jp-StatusBar')?.innerText || '')", timeout=120_000, polling=500)  # the kernel is up
    page.locator(".jp-Notebook .jp-Cell").first.click()  # the notebook has the focus: the menus apply to it
    # The saved notebook shows execution counts: clear them first, so "every cell has a count" means this run.
    page.get_by_role("menuitem", name="Edit", exact=True).click()
    page.get_by_role("menuitem", name="Clear Outputs of All Cells", exact=True).click()
    page.wait_for_function("() => !Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt'))"
                           ".some(p => /\\[\\d+\\]/.test(p.innerText))", timeout=30_000)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_function(BUSY_JS, timeout=RUN_TIMEOUT_MS, polling=1000)


def local_only(blocked: list[str]) -> Any:
    def route(r: Any) -> None:
        if r.request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()
    return route


def test_notebooks_run_in_jupyterlab_and_the_dashboard_fits_a_projector(lab_server: Served) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    blocked: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", local_only(blocked))

            run_all(page, lab_server.url, "01_quickstart.ipynb")
            assert page.evaluate(ERRORS_JS) == []
            page.screenshot(path=str(ARTIFACTS / "lab_01_quickstart_1280.png"), full_page=True)

            page.close()
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", local_only(blocked))
            run_all(page, lab_server.url, "02_threshold_explorer.ipynb")
            assert page.evaluate(ERRORS_JS) == []
            dashboard = page.locator(".crag-dashboard").first
            try:
                dashboard.wait_for(state="attached", timeout=60_000)
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "lab_failure.png"), full_page=True)
                raise
            assert page.locator(".crag-dashboard .widget-slider").count() >= 5
            assert page.locator(".crag-frontier-plot").count() == 1

            exp = Experiment.load(RECORDING)
            counts = page.locator(".crag-route-counts").first
            shown = json.loads(counts.get_attribute("data-counts") or "{}")
            assert shown == exp.replay(exp.config).route_counts()
            # The keyboard, as a teacher on a projector would: the handle of generate_threshold, then End (1.0).
            # (Typing into the readout would reach JupyterLab's own shortcuts in command mode.)
            name, value = "generate_threshold", 1.0
            assert exp.replay(**{name: value}).route_counts() != shown, "End must change the recorded routes"
            handle = page.locator(f".crag-control-{name} .noUi-handle").first
            handle.scroll_into_view_if_needed()
            handle.focus()
            page.keyboard.press("End")
            page.wait_for_function(
                "([name, value]) => { const el = document.querySelector('.crag-route-counts');"
                " return el && JSON.parse(el.dataset.config)[name] === value; }", arg=[name, value], timeout=60_000)
            assert json.loads(counts.get_attribute("data-counts") or "{}") == exp.replay(**{name: value}).route_counts()

            dashboard.scroll_into_view_if_needed()
            assert page.evaluate(OVERFLOW_JS) == [], "dashboard elements overflow at 1280 px"
            page.screenshot(path=str(ARTIFACTS / "lab_02_dashboard_1280.png"), full_page=True)
            # Labels of the queries that change are not cut on a wide screen either.
            page.set_viewport_size({"width": 1440, "height": 900})
            page.wait_for_timeout(1000)
            assert page.evaluate(OVERFLOW_JS) == [], "dashboard elements overflow at 1440 px"
            flipped = page.locator(".crag-flipped select").first
            assert flipped.evaluate("el => el.options.length") > 0, "End must list the queries that change"
            widest = flipped.evaluate("el => { const c = document.createElement('canvas').getContext('2d');"
                                      " c.font = getComputedStyle(el).font;"
                                      " return Math.max(...Array.from(el.options).map(o => c.measureText(o.text).width)); }")
            assert widest <= flipped.evaluate("el => el.clientWidth"), "the list of changed queries cuts its labels"
            page.set_viewport_size({"width": 1024, "height": 768})
            page.wait_for_timeout(1000)  # the lab re-lays out its panels
            assert page.evaluate(OVERFLOW_JS) == [], "dashboard elements overflow at 1024 px"
            # On a projector the sliders and the plot they move are on screen together, the plot at full size.
            page.locator(".crag-dashboard").first.evaluate("el => el.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(500)
            slider = page.locator(".crag-control-relevance_floor").first.bounding_box()
            image = page.locator(".crag-dashboard img").first
            plot = image.bounding_box()
            assert slider is not None and plot is not None
            assert slider["y"] >= 0 and plot["y"] + 0.3 * plot["height"] <= 768, (slider, plot)
            natural = image.evaluate("el => el.naturalWidth")
            assert plot["width"] >= 0.95 * natural, f"the plots are drawn {natural} px wide but shown {plot['width']} px"
            page.screenshot(path=str(ARTIFACTS / "lab_02_dashboard_1024x768_view.png"))
            dashboard.screenshot(path=str(ARTIFACTS / "lab_02_dashboard_1024.png"))
        finally:
            browser.close()
    assert not blocked, f"JupyterLab tried to reach other hosts: {blocked[:5]}"


# What a student sees before Run All, on a projector: every committed output fits its panel (a wide table
# scrolls inside its own `.crag-scroll` box), no table cell is cut to "...", and no widget shows as its repr.
WIDTHS_JS = """() => {
  const wide = [], cut = [], reprs = [], boxes = [];
  const outputs = document.querySelectorAll('.jp-Notebook .jp-OutputArea-output');
  for (const out of outputs) {
    const cell = out.closest('.jp-Cell');
    const index = Array.from(cell.parentElement.children).indexOf(cell);
    if (out.scrollWidth > out.clientWidth + 1) wide.push({cell: index, scroll: out.scrollWidth, client: out.clientWidth});
    for (const box of out.querySelectorAll('.crag-scroll')) {
      boxes.push({cell: index, overflow: getComputedStyle(box).overflowX, scroll: box.scrollWidth, client: box.clientWidth});
      if (box.getBoundingClientRect().right > out.getBoundingClientRect().right + 1)
        wide.push({cell: index, box: box.getBoundingClientRect().width, client: out.clientWidth});
    }
    for (const td of out.querySelectorAll('td, th')) {
      if (/\\.\\.\\.$|…$/.test(td.innerText.trim())) cut.push({cell: index, text: td.innerText.slice(0, 80)});
    }
    const text = out.innerText;
    if (/\\b[VH]Box\\(children=|\\b(HTML|Image|FloatSlider|Output)\\(value=|Error displaying widget/.test(text))
      reprs.push({cell: index, text: text.slice(0, 120)});
  }
  // The panel: what an output may use (a rendered Markdown cell sits beside the same prompt column).
  const panel = document.querySelector('.jp-Notebook .jp-OutputArea-output, .jp-Notebook .jp-RenderedMarkdown');
  return {wide, cut, reprs, boxes, outputs: outputs.length, panel: panel ? panel.getBoundingClientRect().width : 0};
}"""
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


def open_saved(page: Any, url: str, notebook: str) -> None:
    """Open ``notebook`` as committed (no cell run) with JupyterLab's default layout: the file browser open."""
    page.goto(f"{url}lab/tree/{notebook}?reset", timeout=120_000)
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
    if not page.locator("#filebrowser").is_visible():
        page.get_by_role("tab", name="File Browser").first.click()
    page.locator("#filebrowser").wait_for(state="visible", timeout=30_000)
    page.wait_for_timeout(1500)  # images, Markdown and Mermaid outputs settle


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_saved_outputs_fit_a_projector_with_the_file_browser_open(lab_server: Served, notebook: str) -> None:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    blocked: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1024, "height": 768})
            page.route("**/*", local_only(blocked))
            open_saved(page, lab_server.url, notebook)
            found = page.evaluate(WIDTHS_JS)
            page.screenshot(path=str(ARTIFACTS / f"lab_saved_{notebook.removesuffix('.ipynb')}_1024.png"),
                            full_page=True)
        finally:
            browser.close()
    assert 0 < found["panel"] < 700, f"the output panel is {found['panel']} px wide: is the file browser open?"
    saved = sum(len(c.get("outputs", [])) for c in json.loads((ROOT / "notebooks" / notebook).read_text())["cells"])
    assert found["outputs"] >= min(saved, 1), f"{notebook}: {saved} saved outputs, none rendered"
    # A wide table scrolls inside its own box: the page's sanitizer must have kept that box's style.
    assert all(b["overflow"] == "auto" for b in found["boxes"]), found["boxes"]
    print(notebook, found)
    assert found["wide"] == [], f"{notebook}: outputs wider than their {found['panel']} px panel"
    assert found["cut"] == [], f"{notebook}: table cells cut short"
    assert found["reprs"] == [], f"{notebook}: widgets shown as their repr text"
    assert not blocked, f"JupyterLab tried to reach other hosts: {blocked[:5]}"
