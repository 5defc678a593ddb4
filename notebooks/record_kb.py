"""Record the labelled knowledge-base questions in every compared mode, for notebooks 02 and 03.

Run it again after any change to the engine (router, planner, grader, synthesizer, prompts): the
notebooks check that the recordings match what the installed engine does and fail otherwise.
Offline and deterministic; several minutes on a laptop (per-item grading is the slow mode).

    .venv/bin/python notebooks/record_kb.py                # every mode
    .venv/bin/python notebooks/record_kb.py naive_rag      # one mode
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main(modes: list[str]) -> None:
    from crag_lab import CragConfig, Lab
    from crag_lab.eval import COMPARED_MODES, evaluate, load_dataset

    config = CragConfig(relevance_floor=0.3, generate_threshold=0.7, vector_score_threshold=0.8,
                        auto_approve_max_items=2, max_iterations=3)
    lab = Lab.from_directory(ROOT / "data" / "kb", config=config, remote=False)
    dataset = load_dataset(ROOT / "data" / "kb_queries.jsonl", kb=ROOT / "data" / "kb")
    for mode in modes or list(COMPARED_MODES):
        start = time.perf_counter()
        recording = evaluate(lab, dataset, modes=[mode]).experiments[mode]
        path = recording.save(HERE / "recordings" / f"kb_{mode}.jsonl")
        print(f"{mode}: {len(recording)} queries -> {path.relative_to(ROOT)} ({time.perf_counter() - start:.0f} s)",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
