"""Evaluation metrics as pure functions of plain values: scores, labels, answers, locations.

No graph, model, pandas or I/O in here. Every function returns ``None`` where its input cannot say
(no positives for an AUROC, no answerable question for a containment rate), never a made-up 0.

>>> auroc([0.9, 0.4, 0.4, 0.1], [True, True, False, False])
0.875
>>> GoldRef.parse("adr/0009.md:L25-L27").matches("adr/0009.md", 20, 25)
True
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from crag_lab.prompts import NO_EVIDENCE_ANSWER

COMPLEXITIES = ("chitchat", "simple", "complex")
_GOLD = re.compile(r"^(?P<path>.+?):L(?P<start>\d+)(?:-L?(?P<end>\d+))?$")
_STATS_MARK = "📊 **LLM Usage Stats:**"
_FOOTER_MARK = "\n\nSources:\n"


# ---- locations and the overlap rule ------------------------------------------------------------


def overlaps(start: int | None, end: int | None, gold_start: int | None, gold_end: int | None) -> bool:
    """True when two inclusive line ranges share a line; a missing range means "the whole file".

    >>> overlaps(10, 12, 12, 20), overlaps(10, 12, 13, 20), overlaps(None, None, 5, 6)
    (True, False, True)
    """
    if start is None or gold_start is None:
        return True
    end = start if end is None else end
    gold_end = gold_start if gold_end is None else gold_end
    return start <= gold_end and gold_start <= end


@dataclass(frozen=True)
class GoldRef:
    """A gold location: a file path, optionally with an inclusive 1-based line range."""

    path: str
    start: int | None = None
    end: int | None = None

    @classmethod
    def parse(cls, text: str) -> GoldRef:
        """``path`` or ``path:Lstart-Lend`` (``path:L7`` is one line).

        >>> GoldRef.parse("a.md:L3-L5"), GoldRef.parse("b.md")
        (GoldRef(path='a.md', start=3, end=5), GoldRef(path='b.md', start=None, end=None))
        """
        text = str(text).strip()
        match = _GOLD.match(text)
        if match is None:
            if not text:
                raise ValueError("empty gold location; expected 'path' or 'path:Lstart-Lend'")
            return cls(text)
        start = int(match["start"])
        end = int(match["end"]) if match["end"] else start
        if end < start:
            raise ValueError(f"gold location {text!r} ends (L{end}) before it starts (L{start})")
        return cls(match["path"], start, end)

    def matches(self, path: str | None, line: int | None = None, line_end: int | None = None) -> bool:
        """Same path and, when this gold has a line range, overlapping lines."""
        return path is not None and _norm_path(path) == _norm_path(self.path) and overlaps(
            line, line_end, self.start, self.end)

    def __str__(self) -> str:
        return self.path if self.start is None else f"{self.path}:L{self.start}-L{self.end}"


def _norm_path(path: str) -> str:
    return path.strip().lstrip("./").replace("\\", "/")


def is_gold(path: str | None, line: int | None, line_end: int | None, gold: Sequence[GoldRef]) -> bool:
    """An item is gold if it matches any gold location (same path, overlapping lines)."""
    return any(g.matches(path, line, line_end) for g in gold)


def location_of(item_id: str) -> tuple[str, int | None, int | None]:
    """The (path, line, line_end) encoded in an evidence id (``path:L3-L9`` or ``path#hash``).

    >>> location_of("runbooks/x.md:L3-L9"), location_of("jira_fetch#0a1b2c")
    (('runbooks/x.md', 3, 9), ('jira_fetch', None, None))
    """
    match = re.match(r"^(?P<path>.+):L(?P<start>\d+)-L(?P<end>\d+)$", item_id)
    if match:
        return match["path"], int(match["start"]), int(match["end"])
    return item_id.split("#", 1)[0], None, None


# ---- grader quality -----------------------------------------------------------------------------


def _pairs(scores: Sequence[float], labels: Sequence[bool]) -> list[tuple[float, bool]]:
    if len(scores) != len(labels):
        raise ValueError(f"got {len(scores)} scores but {len(labels)} labels; pass one label per score")
    return [(float(s), bool(y)) for s, y in zip(scores, labels, strict=True)]


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve: the chance a random gold item outscores a random non-gold one.

    Ties count one half (the Mann-Whitney U statistic). None without both classes.

    >>> auroc([0.5, 0.5], [True, False]), auroc([0.2, 0.8], [True, False]), auroc([0.3], [True])
    (0.5, 0.0, None)
    """
    pairs = _pairs(scores, labels)
    n_pos = sum(1 for _, y in pairs if y)
    n_neg = len(pairs) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    # Average ranks (1-based) over tied groups, then U = rank sum of positives - n_pos(n_pos+1)/2.
    ordered = sorted(pairs, key=lambda p: p[0])
    rank_sum = 0.0
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1][0] == ordered[i][0]:
            j += 1
        avg_rank = (i + j) / 2 + 1
        rank_sum += avg_rank * sum(1 for k in range(i, j + 1) if ordered[k][1])
        i = j + 1
    u = rank_sum - n_pos * (n_pos + 1) / 2
    return u / (n_pos * n_neg)


def floor_precision_recall(
    scores: Sequence[float], labels: Sequence[bool], floor: float
) -> tuple[float | None, float | None]:
    """The relevance floor as a classifier: precision and recall of "kept" (score >= floor) for gold.

    >>> floor_precision_recall([0.9, 0.5, 0.2, 0.1], [True, False, True, False], 0.3)
    (0.5, 0.5)
    """
    pairs = _pairs(scores, labels)
    kept = [y for s, y in pairs if s >= floor]
    n_gold = sum(1 for _, y in pairs if y)
    tp = sum(kept)
    precision = tp / len(kept) if kept else None
    recall = tp / n_gold if n_gold else None
    return precision, recall


@dataclass(frozen=True)
class CalibrationBin:
    """One bin of a reliability diagram: scores in ``[lo, hi)`` (the last bin includes 1.0)."""

    lo: float
    hi: float
    count: int
    mean_score: float | None
    gold_rate: float | None


def calibration_bins(scores: Sequence[float], labels: Sequence[bool], bins: int = 10) -> list[CalibrationBin]:
    """Equal-width bins over [0, 1] with the mean score and the share of gold items in each.

    >>> [b.count for b in calibration_bins([0.05, 0.95, 1.0], [False, True, True], bins=2)]
    [1, 2]
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    grouped: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for s, y in _pairs(scores, labels):
        clipped = min(max(s, 0.0), 1.0)
        grouped[min(int(clipped * bins), bins - 1)].append((clipped, y))
    out = []
    for b, members in enumerate(grouped):
        n = len(members)
        out.append(CalibrationBin(b / bins, (b + 1) / bins, n,
                                  math.fsum(s for s, _ in members) / n if n else None,
                                  sum(y for _, y in members) / n if n else None))
    return out


def expected_calibration_error(scores: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float | None:
    """ECE: the count-weighted mean gap between mean score and gold rate over equal-width bins.

    A grader whose 0.7 means "gold 70 % of the time" has ECE 0. None for no items.

    >>> expected_calibration_error([0.25, 0.25, 0.75, 0.75], [False, True, True, True], bins=2)
    0.25
    """
    table = calibration_bins(scores, labels, bins)
    total = sum(b.count for b in table)
    if total == 0:
        return None
    gap = math.fsum(b.count * abs((b.mean_score or 0.0) - (b.gold_rate or 0.0)) for b in table if b.count)
    return gap / total


# ---- routing --------------------------------------------------------------------------------------


def _labelled(predicted: Sequence[str | None], expected: Sequence[str | None]) -> list[tuple[str | None, str]]:
    if len(predicted) != len(expected):
        raise ValueError(f"got {len(predicted)} predictions but {len(expected)} labels")
    return [(p, e) for p, e in zip(predicted, expected, strict=True) if e is not None]


def routing_accuracy(predicted: Sequence[str | None], expected: Sequence[str | None]) -> float | None:
    """Share of labelled questions whose predicted complexity equals the label (None: no labels).

    >>> routing_accuracy(["simple", "complex", None], ["simple", "simple", "chitchat"])
    0.3333333333333333
    """
    pairs = _labelled(predicted, expected)
    return sum(p == e for p, e in pairs) / len(pairs) if pairs else None


def class_recall(predicted: Sequence[str | None], expected: Sequence[str | None], label: str) -> float | None:
    """Share of questions labelled ``label`` that were predicted as ``label``.

    >>> class_recall(["chitchat", "simple"], ["chitchat", "chitchat"], "chitchat")
    0.5
    """
    hits = [p == e for p, e in _labelled(predicted, expected) if e == label]
    return sum(hits) / len(hits) if hits else None


def confusion_matrix(
    predicted: Sequence[str | None], expected: Sequence[str | None], labels: Sequence[str] = COMPLEXITIES
) -> dict[str, dict[str, int]]:
    """Counts ``matrix[label][prediction]``; an unknown or missing prediction counts as ``"other"``.

    >>> confusion_matrix(["simple", None], ["simple", "complex"])["complex"]
    {'chitchat': 0, 'simple': 0, 'complex': 0, 'other': 1}
    """
    columns = [*labels, "other"]
    matrix = {e: dict.fromkeys(columns, 0) for e in labels}
    for p, e in _labelled(predicted, expected):
        row = matrix.setdefault(e, dict.fromkeys(columns, 0))
        row[p if p is not None and p in labels else "other"] += 1
    return matrix


# ---- answers and citations --------------------------------------------------------------------------


def answer_body(answer: str) -> str:
    """The answer without the system's ``Sources:`` footer and usage-stats block.

    >>> text = "Port 8443 [1].\\n\\nSources:\\n[1] gw.md:L3-L4\\n\\n---\\n📊 **LLM Usage Stats:**\\n- API calls: 3"
    >>> answer_body(text)
    'Port 8443 [1].'
    """
    text = answer
    at = text.find(_STATS_MARK)
    if at >= 0:
        text = text[:at].rstrip()
        if text.endswith("---"):
            text = text[:-3]
    at = text.rfind(_FOOTER_MARK)
    if at >= 0:
        text = text[:at]
    return text.strip()


def is_abstention(answer: str) -> bool:
    """True when the answer is the spec's no-evidence sentence (footer and stats ignored)."""
    return answer_body(answer).strip() == NO_EVIDENCE_ANSWER


def _normal(text: str) -> str:
    return " ".join(text.replace("**", "").replace("`", "").casefold().split())


def answer_contained(answer: str, answers: Iterable[str]) -> bool | None:
    """True when any gold answer string occurs in the answer body (case- and spacing-insensitive).

    None when there is no gold answer string to look for.

    >>> answer_contained("The port is **8443** [1].", ["8443"]), answer_contained("No.", [])
    (True, None)
    """
    wanted = [_normal(a) for a in answers if a and a.strip()]
    if not wanted:
        return None
    body = _normal(answer_body(answer))
    return any(w in body for w in wanted)


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_MARKERS = re.compile(r"\[\d{1,3}\]")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's and HotpotQA's answer normalisation: lower case, no punctuation, articles or extra spaces.

    >>> normalize_answer("The  Port: **8443**!")
    'port 8443'
    """
    text = "".join(ch for ch in text.casefold() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


_LEAD = re.compile(r"^\*\*(?P<lead>[^*]+)\*\* — ")


def short_answer(answer: str) -> str | None:
    """The answer's short form: the bold lead the offline synthesizer opens with (``**8443** — quote``).

    None when the answer has no such lead (an LLM's prose, a quote alone, an abstention).

    >>> short_answer("**8443** — Public listener: 8443 (TLS) [1]."), short_answer("Port 8443 [1].")
    ('8443', None)
    """
    match = _LEAD.match(answer_body(answer))
    return match.group("lead") if match else None


def _prediction(answer: str) -> str:
    """The answer as a prediction: its short form when it has one (`short_answer`), else its body,
    citation markers out; an abstention predicts nothing."""
    if is_abstention(answer):
        return ""
    return _MARKERS.sub(" ", short_answer(answer) or answer_body(answer))


def exact_match(answer: str, answers: Iterable[str]) -> bool | None:
    """The official exact match: the normalised answer body equals a normalised gold answer.

    An answer with a short form (`short_answer`) is judged by it; a quote alone rarely matches
    exactly, and `token_f1` gives it partial credit. None when there is no gold answer.

    >>> exact_match("8443 [1].", ["8443"]), exact_match("Port 8443 [1].", ["8443"])
    (True, False)
    >>> exact_match("**8443** — Public port: 8443 [1].", ["8443"])
    True
    """
    wanted = [normalize_answer(a) for a in answers if a and a.strip()]
    if not wanted:
        return None
    return normalize_answer(_prediction(answer)) in wanted


def token_f1(answer: str, answers: Iterable[str]) -> float | None:
    """The official token F1 (SQuAD, HotpotQA), best over the gold answers; None without one.

    >>> round(token_f1("The public port is 8443 [1].", ["8443"]), 3)
    0.4
    """
    wanted = [normalize_answer(a).split() for a in answers if a and a.strip()]
    if not wanted:
        return None
    predicted = normalize_answer(_prediction(answer)).split()
    best = 0.0
    for gold in wanted:
        common = sum((Counter(predicted) & Counter(gold)).values())
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def citation_precision_recall(
    cited: Sequence[tuple[str | None, int | None, int | None]], gold: Sequence[GoldRef]
) -> tuple[float | None, float | None]:
    """Share of cited locations that match a gold location, and share of gold locations cited.

    Precision is None when nothing is cited, recall None when there is no gold.

    >>> gold = [GoldRef("a.md", 10, 12), GoldRef("b.md")]
    >>> citation_precision_recall([("a.md", 1, 11), ("c.md", 1, 5)], gold)
    (0.5, 0.5)
    """
    precision = sum(is_gold(p, s, e, gold) for p, s, e in cited) / len(cited) if cited else None
    recall = sum(any(g.matches(p, s, e) for p, s, e in cited) for g in gold) / len(gold) if gold else None
    return precision, recall


LOSS_STAGES = ("answered", "not_retrieved", "dropped_by_grader", "abstained", "not_cited", "not_quoted")
"""Where an answerable question ends up, in pipeline order: answered, or lost at the first stage that
missed the gold passage (no tool found it; the grader dropped it; the synthesizer abstained, cited
other passages, or cited the gold passage without quoting the answer)."""


def loss_stage(*, contained: bool | None, abstained: bool, retrieved_gold: bool, evidence_gold: bool,
               cited_gold: bool) -> str | None:
    """The first stage at which an answerable question lost its answer (see `LOSS_STAGES`).

    None when the question cannot say (``contained`` is None: no gold answer string).

    >>> loss_stage(contained=False, abstained=False, retrieved_gold=True, evidence_gold=False, cited_gold=False)
    'dropped_by_grader'
    >>> loss_stage(contained=False, abstained=False, retrieved_gold=True, evidence_gold=True, cited_gold=True)
    'not_quoted'
    """
    if contained is None:
        return None
    if contained:
        return "answered"
    if not retrieved_gold:
        return "not_retrieved"
    if not evidence_gold:
        return "dropped_by_grader"
    if abstained:
        return "abstained"
    return "not_quoted" if cited_gold else "not_cited"


ABSTAIN_CAUSES: tuple[tuple[str, str], ...] = (
    ("names", "which no evidence item holds"),
    ("nothing_to_quote", "no evidence item has a sentence, row or line to quote"),
    ("negation", "the question asks what is not so"),
    ("doubt_reader", "the doubt reader finds no answer"),
    ("scorer_probability", "the learned scorer gives its best-matching unit"),
    ("weak_best_unit", "below ABSTAIN_BELOW"),
)
"""Why the offline synthesizer abstained, as a code and the phrase of its reason that says so
(`crag_lab.offline.synthesizer.why_abstained`, `crag_lab.offline.doubt.doubted`), checked in this order."""

ABSTAIN_CAUSE_ORDER = ("no_evidence", *(code for code, _ in ABSTAIN_CAUSES), "unexplained")
"""Every cause `abstain_cause` returns: ``no_evidence`` when no item reached the synthesizer (nothing
retrieved, or the grader dropped every item), ``unexplained`` when the model abstained without saying why
(an LLM does not)."""


def abstain_cause(*, no_evidence: bool, reason: str | None) -> str:
    """The code (`ABSTAIN_CAUSE_ORDER`) of why a run abstained, from its record: whether the synthesizer had
    no evidence, else the reason the offline synthesizer gave (the ``read`` record's ``why``).

    >>> abstain_cause(no_evidence=False, reason="its best unit has support 0.41, below ABSTAIN_BELOW 0.8")
    'weak_best_unit'
    >>> abstain_cause(no_evidence=True, reason=None), abstain_cause(no_evidence=False, reason=None)
    ('no_evidence', 'unexplained')
    """
    if no_evidence:
        return "no_evidence"
    return next((code for code, phrase in ABSTAIN_CAUSES if reason and phrase in reason), "unexplained")


# ---- aggregation helpers ----------------------------------------------------------------------------


def rate(flags: Iterable[bool | None]) -> float | None:
    """Share of True among the flags that are not None (None when all are None).

    >>> rate([True, False, None, True])
    0.6666666666666666
    """
    known = [bool(f) for f in flags if f is not None]
    return sum(known) / len(known) if known else None


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values that are not None or NaN (None when there are none).

    >>> mean([1, None, 2, float("nan")])
    1.5
    """
    known = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return math.fsum(known) / len(known) if known else None


def fast_path_rates(rules: Sequence[str | None], complexities: Sequence[str | None]) -> dict[str, float | None]:
    """Hit rate per fast path: pre-filter rules per grading round, chitchat/simple per question.

    ``rules`` holds one entry per grading round (the rule that fired, or None); ``complexities``
    one per question (the predicted complexity).

    >>> fast_path_rates(["few_context", None], ["simple", "complex", "chitchat", "complex"])["few_context"]
    0.5
    """
    out: dict[str, float | None] = {}
    for rule in ("read_file", "few_context", "high_vector_score"):
        out[rule] = sum(r == rule for r in rules) / len(rules) if rules else None
    for route in ("chitchat", "simple"):
        out[route] = sum(c == route for c in complexities) / len(complexities) if complexities else None
    return out
