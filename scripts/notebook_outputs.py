"""Regenerate the saved outputs of notebooks/0*.ipynb, as nbval then checks them.

    .venv/bin/python scripts/notebook_outputs.py notebooks/02_threshold_explorer.ipynb   # one notebook
    .venv/bin/python scripts/notebook_outputs.py --pictures notebooks/02_*.ipynb          # and its dashboard picture

Each notebook runs top to bottom in notebooks/ (as `pytest --nbval-lax` runs it) and is written back
with its outputs. A cell tagged ``dashboard-picture`` shows a live widget: its saved output would be a
widget repr ("VBox(children=...") before Run All and "model not found" after a restart, so it is
replaced by a saved screenshot of that dashboard, ``notebooks/img/<notebook>_dashboard.png``, under a
line saying to run the cell. ``--pictures`` takes those screenshots first: Voilà serves the notebook's
cells up to the dashboard, Debian's Chromium renders it 592 px wide (a 1024 px screen with JupyterLab's
file browser open), and the picture is stored with a 256-colour palette to stay small.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
IMAGES = NOTEBOOKS / "img"
TAG = "dashboard-picture"
PANEL_PX = 592
CAPTION = ("*A saved picture of the dashboard this cell draws ({where}). Run the cell to make it live: "
           "the sliders then re-decide the recording.*")


def picture_path(notebook: Path) -> Path:
    return IMAGES / f"{notebook.stem}_dashboard.png"


def execute(notebook: Path, timeout_s: int = 900) -> nbformat.NotebookNode:
    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def put_pictures(notebook: Path, nb: nbformat.NotebookNode) -> int:
    """Replace each ``dashboard-picture`` cell's outputs by the saved picture; how many were replaced."""
    replaced = 0
    for cell in nb.cells:
        if TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        png = picture_path(notebook)
        if not png.exists():
            raise FileNotFoundError(f"{png} is missing: run this script with --pictures {notebook}")
        where = f"`{png.relative_to(NOTEBOOKS)}`"
        cell.outputs = [
            nbformat.v4.new_output("display_data", data={"text/markdown": CAPTION.format(where=where),
                                                         "text/plain": CAPTION.format(where=where)}),
            nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(png.read_bytes()).decode(),
                                                         "text/plain": "<picture of the dashboard>"}),
        ]
        replaced += 1
    nb.metadata.pop("widgets", None)  # no saved widget state: nothing for the page to look up
    return replaced


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def take_picture(notebook: Path) -> Path:
    """Serve the notebook's cells up to its dashboard with Voilà and screenshot the dashboard."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    nb = nbformat.read(notebook, as_version=4)
    cells = [nbformat.v4.new_code_cell(f"import os\nos.chdir({str(NOTEBOOKS)!r})")]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cells.append(nbformat.v4.new_code_cell(cell.source))
            if TAG in cell.get("metadata", {}).get("tags", []):
                break
    else:
        raise ValueError(f"{notebook} has no cell tagged {TAG!r}")
    with tempfile.TemporaryDirectory() as tmp:
        page_nb = Path(tmp) / "dashboard.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=nb.metadata), page_nb)
        port = _free_port()
        log = Path(tmp) / "voila.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "voila", str(page_nb), "--no-browser", f"--port={port}",
                                     "--Voila.ip=127.0.0.1"], cwd=tmp, stdout=fh, stderr=subprocess.STDOUT,
                                    env=os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        try:
            deadline = time.monotonic() + 90
            while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"voila did not start:\n{log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.3)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
                try:
                    page = browser.new_page(viewport={"width": PANEL_PX + 40, "height": 4000})
                    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(
                        ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")) else r.abort())
                    page.goto(f"http://127.0.0.1:{port}/", timeout=600_000, wait_until="commit")
                    dashboard = page.locator(".crag-dashboard").first
                    dashboard.wait_for(state="visible", timeout=600_000)
                    page.evaluate(f"() => {{ const d = document.querySelector('.crag-dashboard');"
                                  f" d.style.width = '{PANEL_PX}px'; }}")
                    page.wait_for_timeout(2000)
                    # The part a student sees first: the sliders and the plots they move.
                    top = dashboard.bounding_box()
                    plots = page.locator(".crag-dashboard img").first.bounding_box()
                    assert top is not None and plots is not None
                    shot = page.screenshot(clip={"x": top["x"], "y": top["y"], "width": top["width"],
                                                 "height": plots["y"] + plots["height"] - top["y"] + 8})
                finally:
                    browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    image = Image.open(io.BytesIO(shot)).convert("RGB").quantize(colors=256)
    IMAGES.mkdir(exist_ok=True)
    out = picture_path(notebook)
    image.save(out, optimize=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--pictures", action="store_true", help="take the dashboard screenshots first (Chromium)")
    args = parser.parse_args(argv)
    for notebook in args.notebooks:
        notebook = notebook.resolve()
        if args.pictures and TAG in notebook.read_text(encoding="utf-8"):
            print(f"{notebook.name}: picture {take_picture(notebook).relative_to(ROOT)}")
        start = time.monotonic()
        nb = execute(notebook)
        replaced = put_pictures(notebook, nb)
        nbformat.write(nb, notebook)
        print(f"{notebook.name}: executed in {time.monotonic() - start:.0f} s; {replaced} dashboard picture(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
