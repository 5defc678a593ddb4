"""Errors of the knowledge-base layer; each message names the folder or file and what to do."""

from __future__ import annotations

from crag_lab.errors import CragLabError
from crag_lab.tools._base import ToolError


class KnowledgeBaseError(CragLabError):
    """Base class of every knowledge-base error."""


class EmptyKnowledgeBaseError(KnowledgeBaseError):
    """The folder holds no usable text file (or only empty ones), so there is nothing to index."""


class IndexMissingError(KnowledgeBaseError):
    """No index has been built for this folder yet."""


class IndexCorruptError(KnowledgeBaseError):
    """The persisted index is unreadable or inconsistent; ``KnowledgeBase.build`` repairs it."""


class IndexFolderError(KnowledgeBaseError):
    """A folder a build refuses to write its index into: it holds files crag_lab did not write (or the
    knowledge base itself), so the index would mix its files with the user's."""


class EmbeddingModelMismatchError(KnowledgeBaseError):
    """The index was built with another embedding model than the one given to ``load``."""


class PathOutsideKnowledgeBaseError(KnowledgeBaseError, ToolError):
    """A path given to ``read``/``grep`` resolves outside the knowledge-base folder."""


class FileNotInKnowledgeBaseError(KnowledgeBaseError, ToolError):
    """A path inside the folder that is not a knowledge-base file (missing, hidden, binary, other type)."""


class PatternTooExpensiveError(KnowledgeBaseError, ToolError):
    """A ``grep`` pattern refused because matching it could take too long (or compiling it too much memory)."""
