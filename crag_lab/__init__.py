"""crag_lab: see, and change, how a corrective-RAG agent decides.

>>> from crag_lab import CragConfig, Lab, build_graph
"""

from crag_lab.config import CragConfig
from crag_lab.experiment import Experiment, ReplayReport
from crag_lab.graph import build_graph
from crag_lab.kb import KnowledgeBase
from crag_lab.lab import AskResult, Lab
from crag_lab.models import CragModel, LlamaIndexModel, ModelReply

__all__ = [
    "AskResult",
    "CragConfig",
    "CragModel",
    "Experiment",
    "KnowledgeBase",
    "Lab",
    "LlamaIndexModel",
    "ModelReply",
    "ReplayReport",
    "build_graph",
]
__version__ = "0.1.0"
