"""The default path never imports the scale-out engines: Ray and Qdrant load only when asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

DEFAULT_PATH = """
import json, sys
import crag_lab
from crag_lab import Experiment, Lab
from crag_lab.eval import evaluate, load_dataset
import crag_lab.dashboard, crag_lab.plots  # what the notebooks import

lab = Lab.from_directory(sys.argv[1], remote=False)
lab.ask("On which port does the gateway accept TLS traffic?")
exp = lab.run(["hello!", "Which port does the gateway use?"], concurrency=2)
exp.replay(relevance_floor=0.5)
evaluate(lab, load_dataset(sys.argv[2], kb=sys.argv[1]), ["knowledge_base"], journal_dir=sys.argv[3])
heavy = ("ray", "qdrant_client", "llama_index.vector_stores.qdrant")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m.startswith(heavy))))
"""


def test_the_default_path_imports_neither_ray_nor_qdrant(make_kb: Callable[..., Path], tmp_path: Path) -> None:
    root = make_kb({"gateway.md": "# Gateway\n\nThe gateway accepts TLS traffic on port 8443.\n"})
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q1", "question": "Which port takes TLS?", "answer": "8443",
                                     "gold": ["gateway.md:L3"]}) + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", DEFAULT_PATH, str(root), str(questions), str(tmp_path / "journal")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
