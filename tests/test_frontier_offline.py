"""The frontier's replayed numbers equal a real re-run with the offline model, at three of its settings.

A small engineering knowledge base, nine labelled questions recorded once with the bundled offline
model; the frontier replays them over a grid; at three settings of different cost whose every question
stays inside the recording (Pareto-optimal ones first), the graph is run again for real and measured
the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crag_lab import CragConfig, Lab
from crag_lab.parsing import strip_stats_blocks
from crag_lab.records import QueryRecord, usage_tokens
from crag_lab.replay import Experiment
from crag_lab.replay.frontier import Frontier

pytestmark = pytest.mark.slow

KB = {
    "services/api-gateway.md": "# api-gateway\n\nThe api-gateway terminates public TLS.\n\n"
                               "| Field | Value |\n|---|---|\n| Public TLS port | 8443 |\n| Admin port | 9000 |\n"
                               "| Owning team | Edge |\n",
    "services/card-router.md": "# card-router\n\ncard-router picks the acquirer for each card payment.\n\n"
                               "| Field | Value |\n|---|---|\n| Owning team | Payments |\n| Language | Go |\n",
    "teams.md": "# Teams\n\n| Team | Lead | Channel |\n|---|---|---|\n| Payments | Tiago Mendes | #team-payments |\n"
                "| Edge | Ana Ruiz | #team-edge |\n",
    "runbooks/certs.md": "# Certificate rotation\n\nCertificates are rotated every 90 days by the Edge team.\n\n"
                        "Run `gwctl certs rotate --env prod` to rotate them, then watch the 5xx rate for ten "
                        "minutes.\n",
    "runbooks/oncall.md": "# On-call\n\nThe on-call rotation changes every Monday at 10:00 UTC.\n\n"
                          "Pages go to the team channel first and escalate after 15 minutes.\n",
    "adr/0007-queues.md": "# ADR 7: queues\n\nWe chose Kafka over RabbitMQ because replay of the payment log "
                          "must be possible for 30 days.\n",
}
QUESTIONS = [
    {"id": "p1", "question": "On which port does the api-gateway accept public TLS traffic?",
     "gold": ["services/api-gateway.md:L7"], "answers": ["8443"], "answerable": True, "complexity": "simple"},
    {"id": "p2", "question": "Who leads the team that owns card-router?",
     "gold": ["services/card-router.md:L7", "teams.md:L5"], "answers": ["Tiago Mendes"], "answerable": True,
     "complexity": "complex"},
    {"id": "p3", "question": "How often are the gateway certificates rotated, and with which command?",
     "gold": ["runbooks/certs.md:L3-L5"], "answers": ["90 days"], "answerable": True, "complexity": "complex"},
    {"id": "p4", "question": "When does the on-call rotation change?",
     "gold": ["runbooks/oncall.md:L3"], "answers": ["Monday"], "answerable": True, "complexity": "simple"},
    {"id": "p5", "question": "Why did we choose Kafka instead of RabbitMQ?",
     "gold": ["adr/0007-queues.md:L3-L4"], "answers": ["30 days"], "answerable": True, "complexity": "complex"},
    {"id": "p6", "question": "Which language is card-router written in, and who leads its team?",
     "gold": ["services/card-router.md:L8", "services/card-router.md:L7", "teams.md:L5"], "answers": ["Go"],
     "answerable": True, "complexity": "complex"},
    {"id": "p7", "question": "What is the admin port of the api-gateway and which team owns it?",
     "gold": ["services/api-gateway.md:L8-L9"], "answers": ["9000"], "answerable": True, "complexity": "complex"},
    {"id": "p8", "question": "What is the retention period of the search cluster snapshots?",
     "gold": [], "answers": [], "answerable": False, "complexity": "simple"},
    {"id": "p9", "question": "Thanks, that helps!", "gold": [], "answers": [], "answerable": True,
     "complexity": "chitchat"},
]
GRID = {"relevance_floor": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "generate_threshold": [0.3, 0.5, 0.6, 0.7, 0.8, 0.9],
        "vector_score_threshold": [0.5, 0.6, 0.7, 0.8], "max_iterations": [1, 2, 3]}
# max_iterations gives settings of different cost whatever the grader's grades: a question that refines
# is capped after one, two or three rounds, and replay knows each exactly.


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    from conftest import write_tree

    root: Path = write_tree(tmp_path_factory.mktemp("frontier") / "kb", KB)
    # The questions were written so that the rules router sends them down routes of three different
    # costs; what is tested is replay against a real re-run, whichever router decided.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CRAG_OFFLINE_ROUTER", "rules")
        return Lab.from_directory(root, config=CragConfig(), remote=False)


@pytest.fixture(scope="module")
def recorded(lab: Lab) -> Experiment:
    return lab.run(QUESTIONS, shadow_grading=False)


def answer(record: QueryRecord) -> str:
    return strip_stats_blocks(str(record["answer"]))  # without the usage block's latencies


def exact_points(front: Frontier, count: int) -> list[int]:
    """``count`` settings of different cost where no question leaves the recording, Pareto-optimal ones first."""
    table = front.table()
    exact = table.index[table["needs_rerun"] == 0].tolist()
    pareto = [int(s) for m in ("gold_f1", "gold_recall", "gold_precision") for s in front.pareto(m).index
              if table.iloc[s]["needs_rerun"] == 0]
    chosen: dict[float, int] = {}
    for s in [*pareto, *exact]:
        chosen.setdefault(float(table.iloc[s]["calls_per_question"]), int(s))
    return list(chosen.values())[:count]


def test_three_frontier_points_equal_a_real_rerun(lab: Lab, recorded: Experiment) -> None:
    front = recorded.frontier(**GRID)
    points = exact_points(front, 3)
    assert len(points) == 3, "the grid should hold three exact settings of different cost"
    n = len(QUESTIONS)
    for s in points:
        config = front.settings.config(recorded.config, s)
        rerun = lab.run(QUESTIONS, config=config, shadow_grading=False)
        measured = rerun.frontier(**{k: [getattr(config, k)] for k in GRID}).scores()
        replayed = front.scores()
        for column in ("calls_per_question", "items_kept", "items_dropped", "gold_kept", "gold_dropped",
                       "outcome_GENERATE", "outcome_capped", "first_REFINE", "first_RE_RETRIEVE"):
            assert measured[column][0] == pytest.approx(replayed[column][s]), (front.setting(s), column)
        calls = [len(r["usage"]) for r in rerun.records]
        assert calls == (front.recorded_calls + front.per_query["calls"][s]).tolist()
        for q in range(n):
            if front.per_query["known"][s, q]:  # every decision as recorded: same evidence, same answer
                assert answer(rerun.records[q]) == answer(recorded.records[q]), QUESTIONS[q]["id"]
                assert usage_tokens(rerun.records[q]["usage"]) == (
                    front.recorded_tokens[q] + front.per_query["tokens"][s, q])
        known = front.per_query["known"][s].astype(bool)
        for metric in ("answer_containment", "citation_precision"):
            mine = rerun.frontier(**{k: [getattr(config, k)] for k in GRID})
            values = getattr(mine, "contained" if metric == "answer_containment" else "citation_precision")
            use = known & ~np.isnan(values)
            if use.any():
                assert replayed[metric][s] == pytest.approx(values[use].mean()), metric


def test_a_question_that_leaves_the_recording_costs_at_least_the_replayed_bound(lab: Lab, recorded: Experiment) -> None:
    """Where replay cannot know, its calls are a lower bound: the real run never spends fewer."""
    front = recorded.frontier(**GRID)
    table = front.table()
    s = int(table["needs_rerun"].to_numpy().argmax())
    leaving = np.flatnonzero(front.per_query["needs_rerun"][s])
    assert len(leaving), "the grid should hold a setting where some question leaves the recording"
    rerun = lab.run(QUESTIONS, config=front.settings.config(recorded.config, s), shadow_grading=False)
    bound = front.recorded_calls + front.per_query["calls"][s]
    for q in leaving.tolist():
        assert len(rerun.records[q]["usage"]) >= bound[q], QUESTIONS[q]["id"]
    # ... and it is the exact count for every other question.
    for q in sorted(set(range(len(QUESTIONS))) - set(leaving.tolist())):
        assert len(rerun.records[q]["usage"]) == bound[q], QUESTIONS[q]["id"]


def test_the_grid_moves_the_cost(recorded: Experiment) -> None:
    """Guard for the test above: the three points must differ, or the comparison proves little."""
    front = recorded.frontier(**GRID)
    costs = front.table()["calls_per_question"]
    assert costs.nunique() >= 3
    assert len(recorded) == len(QUESTIONS)

