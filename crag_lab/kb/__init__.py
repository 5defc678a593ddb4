"""Knowledge bases: a folder of Markdown/text files, chunked by lines and indexed with FAISS + BM25.

>>> from crag_lab.kb import KnowledgeBase
>>> kb = KnowledgeBase.build("docs")  # doctest: +SKIP
>>> kb.vector_retriever(top_k=3).retrieve("how do I install it?")  # doctest: +SKIP
"""

from crag_lab.kb._chunking import Chunk, ChunkSettings
from crag_lab.kb._documents import Documents, load_documents
from crag_lab.kb._errors import (
    EmbeddingModelMismatchError,
    EmptyKnowledgeBaseError,
    FileNotInKnowledgeBaseError,
    IndexCorruptError,
    IndexFolderError,
    IndexMissingError,
    KnowledgeBaseError,
    PathOutsideKnowledgeBaseError,
    PatternTooExpensiveError,
)
from crag_lab.kb._files import TEXT_EXTENSIONS, LoadWarning
from crag_lab.kb.index import BuildReport, KnowledgeBase, Passage

__all__ = [
    "TEXT_EXTENSIONS",
    "BuildReport",
    "Chunk",
    "ChunkSettings",
    "Documents",
    "EmbeddingModelMismatchError",
    "EmptyKnowledgeBaseError",
    "FileNotInKnowledgeBaseError",
    "IndexCorruptError",
    "IndexFolderError",
    "IndexMissingError",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "LoadWarning",
    "Passage",
    "PathOutsideKnowledgeBaseError",
    "PatternTooExpensiveError",
    "load_documents",
]
