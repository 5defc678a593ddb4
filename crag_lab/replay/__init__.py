"""The replay wing: recorded experiments, re-decided at other thresholds without a model call.

`Experiment` holds the records of a `Lab.run` (`crag_lab.records.QueryRecord`), saves and loads
them, and replays them (`Experiment.replay` -> `ReplayReport` of `QueryReplay`). `replay_record`
(`crag_lab.replay.scalar`) is the round-by-round reference; `crag_lab.replay._vectorised` the
numpy engine that equals it and runs by default.

`Experiment.regrade` (`crag_lab.replay.regrade`) replaces every grade with another grader's and
`compare_graders` (`crag_lab.replay.compare`) compares graders on one recording;
`Experiment.tune(guarantee=...)` (`crag_lab.replay.guarantee`) picks thresholds with a guarantee.

>>> from crag_lab.replay import Experiment, ReplayReport
"""

from crag_lab.replay.compare import GraderComparison, compare_graders
from crag_lab.replay.experiment import ENGINES, Engine, Experiment, QueryRound
from crag_lab.replay.regrade import Graded, Grader, regrade
from crag_lab.replay.report import FINAL_OUTCOMES, Outcome, QueryReplay, ReplayReport, outcome_of
from crag_lab.replay.scalar import recorded_outcome, replay_record

__all__ = [
    "ENGINES",
    "FINAL_OUTCOMES",
    "Engine",
    "Experiment",
    "Graded",
    "Grader",
    "GraderComparison",
    "Outcome",
    "QueryReplay",
    "QueryRound",
    "ReplayReport",
    "compare_graders",
    "outcome_of",
    "recorded_outcome",
    "regrade",
    "replay_record",
]
