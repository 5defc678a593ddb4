"""The offline default model: deterministic, no network, good enough to exercise every route."""

from crag_lab.offline.model import OfflineModel

__all__ = ["OfflineModel"]
