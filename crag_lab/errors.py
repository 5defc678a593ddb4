"""The errors crag_lab raises on purpose, under one base class.

Every error the package raises because of its input — a knowledge-base folder, a tool argument, a
question, an experiment file — derives from ``CragLabError``, and its message names the thing that
is wrong and what to do, on one line. The CLI prints such an error as one line and exits non-zero;
a notebook can catch them all with one ``except``.

>>> from crag_lab.kb import KnowledgeBaseError
>>> issubclass(KnowledgeBaseError, CragLabError)
True
"""

from __future__ import annotations


class CragLabError(Exception):
    """Base class of every error crag_lab raises about its input (never about a bug in itself)."""


class InvalidQuestionError(CragLabError, ValueError):
    """A question that is empty or is not valid Unicode text (a lone surrogate)."""


class DuplicateIdError(CragLabError, ValueError):
    """Two or more questions of one query set share an id (a run keys its records, and its journal, by id)."""


class ExperimentFileError(CragLabError, ValueError):
    """An experiment file that is not what ``Experiment.save`` writes; the message names file and line."""


class DatasetFileError(CragLabError, ValueError):
    """A labelled query set or passage file with a row that is not valid; the message names file, line and field."""


class SettingsError(CragLabError, ValueError):
    """A setting the run cannot use (a ``KB_AGENT_*`` / ``CRAG_*`` variable, the ``.env`` file, a URL); the
    message names the variable, file or option and how to fix it."""


class RayUnavailableError(CragLabError, ConnectionError):
    """No Ray cluster answers at the address a run or a build was given; the message names it."""


class GraderError(CragLabError, ValueError):
    """A grader that failed or gave a grade that is not a number in [0, 1] while regrading a recording
    (`crag_lab.replay.regrade`); the message names the grader, the query id and the item."""
