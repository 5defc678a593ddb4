"""crag_lab: see, and change, how a corrective-RAG agent decides.

>>> from crag_lab import CragConfig, Lab, build_graph
"""

from crag_lab.config import CragConfig
from crag_lab.graph import build_graph
from crag_lab.kb import KnowledgeBase
from crag_lab.lab import Lab
from crag_lab.models import CragModel, LlamaIndexModel, ModelReply
from crag_lab.records import ItemRecord, QueryRecord, RoundRecord, run_route, usage_tokens
from crag_lab.replay import Experiment, QueryReplay, ReplayReport, replay_record
from crag_lab.result import AskResult

__all__ = [
    "AskResult",
    "CragConfig",
    "CragModel",
    "Experiment",
    "ItemRecord",
    "KnowledgeBase",
    "Lab",
    "LlamaIndexModel",
    "ModelReply",
    "QueryRecord",
    "QueryReplay",
    "ReplayReport",
    "RoundRecord",
    "build_graph",
    "replay_record",
    "run_route",
    "usage_tokens",
]
__version__ = "0.1.0"
