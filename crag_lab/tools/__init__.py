"""Tools the agent can call. Each returns a JSON array of evidence objects as text."""

from crag_lab.tools._base import Tool, ToolError, ToolRegistry, evidence_json

__all__ = ["Tool", "ToolError", "ToolRegistry", "evidence_json"]
