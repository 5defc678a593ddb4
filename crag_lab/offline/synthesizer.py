"""The offline synthesizer: quote the unit that answers, cite exactly its item, or abstain.

It reads the evidence the way the grader does (`crag_lab.offline.reading`): every unit — a sentence,
list item, table row (``Public port: 8443``) or code line — gets a support score from its MiniLM
cosine with the question, the share of the question's words it holds, and whether it holds the kind
of answer the phrasing asks for (who ⇒ a person, which port / how many ⇒ a number, when ⇒ a date,
which command ⇒ a code span with arguments). The best unit is the answer, cited with its item's
``[N]``; each further part of a multi-part question adds its own best unit, and a comparison the
other side's unit with the same labels. When the question asks a typed thing and the first quote
holds exactly one, the answer opens with it in bold (`short_answer`: ``**8443** — …``). When the best unit's
support is below `ABSTAIN_BELOW`, the question uses a name no evidence item holds (``Maestro``, ``PAY-142``:
`crag_lab.offline.units.names`), it asks what is not so and no quote negates anything (`answers_the_negation`),
or (opt-in) the doubt reader finds none (`crag_lab.offline.doubt`), the answer is the spec's abstention sentence.
>>> from crag_lab.offline.vectors import VectorCache  # doctest: +SKIP
>>> answer("Which port does the gateway use?", [{"n": 1, "text": "The gateway listens on port 8443."}],
...        VectorCache())  # doctest: +SKIP
'**8443** — The gateway listens on port 8443 [1].'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from crag_lab.config import OfflineLead, OfflineReader
from crag_lab.offline import doubt, router
from crag_lab.offline.leads import markdown_lead
from crag_lab.offline.reading import (
    ItemReading,
    Reading,
    UnitReading,
    coverage,
    echoes,
    has_term,
    label_names_asked,
    question_penalty,
    read,
    unit_key,
    unit_support,
)
from crag_lab.offline.text import STOPWORDS, content_terms
from crag_lab.offline.units import (
    asks_for,
    expand,
    found,
    holds,
    kind_labels,
    labelled,
    negates,
    question_parts,
    question_terms,
    shape_of,
    spans,
)
from crag_lab.offline.vectors import VectorCache
from crag_lab.offline.weighed import Answered, weighed_units
from crag_lab.prompts import NO_EVIDENCE_ANSWER

READERS: tuple[str, ...] = get_args(OfflineReader)
"""The readers by name (`crag_lab.config.OfflineReader`, the setting's own type)."""
LEADS: tuple[str, ...] = get_args(OfflineLead)
"""Whether the span reader helps, by name (`crag_lab.config.OfflineLead`): see `respond`."""

ABSTAIN_BELOW = 0.75
"""A best unit whose support (cosine + 0.6 × word coverage ± answer-kind bonus) is below this is no
answer: abstain. Set on the tuning questions (docs/evaluation.md), never on the test split."""
PART_MIN_SUPPORT = 0.75
"""A further part of a multi-part question adds a unit only with at least this support for that part."""
ITEM_WEIGHT = 0.5
"""How much the unit's item cosine adds: a unit of a passage about the question beats a stray match."""
COVERAGE_WEIGHT = 0.6
KIND_BONUS = 0.15
KIND_PENALTY = 0.25
LABEL_BONUS = 0.15
"""A labelled unit whose label names what is asked (``Language: ...`` for "what language")."""
SHAPE_WEIGHT = 0.15
"""Added when a unit has the asked finer shape (a version for "which version"), taken when it has not."""
SAME_ITEM_UNITS = 2
"""When the best unit does not hold the asked kind of answer (or none is asked), at most this many
further units of its item are quoted, when within `SAME_ITEM_MARGIN`: quoting more of one passage
costs no citation precision and often catches an answer the best unit only leads up to."""
SAME_ITEM_MARGIN = 0.5
MAX_UNITS = 3
"""At most this many units before a comparison's other side (`parallel_fact`), which may add one more."""
COMPARING_RULES = ("comparison", "alternatives", "between")
"""The router's complexity rules (`crag_lab.offline.router.COMPLEX_RULES`) that name a comparison."""
WIDE_UNIT_CHARS = 220
READ_UNITS = 3
"""The span reader reads this many of an item's best-supported units (`reader_passage`), not the whole item: with ``span_first``
on, reading every evidence item whole took the offline p50 on a prepared index from 112 to 317 ms (3 units: 167 ms,
bench/RESULTS.md). Of 2, 3, 4, 6 units and the whole item, 3 gives the tuning split's best exact match and token F1
(30.4 / 38.1; whole items 29.4 / 38.1) at the same containment and citation precision (test and public sets unused)."""
SPAN_FIRST_MARGIN = 9.0
"""With a span reader and ``span_first`` on (default; ``CRAG_OFFLINE_SPAN_FIRST=0`` turns it off), the unit holding
its best span over all the evidence is quoted first (before the rules' choice) when that span's margin over "no answer"
is at least this (`span_first`). Picked on the tuning split (the lowest of 0, 3, 6, 9 keeping its citation precision);
the grader's training domains agree: their first quoted item is gold most often at 8, within 3 questions of 675 at 9
and within 0.8 points from 6 to 10 (`bench/study_span_gate.py`, docs/dev/span_gate.md). Test and public sets unused."""
LEARNED_TOP_K = 8
"""The learned reader (`learned_ranked`) asks the scorer about this many units, the top of `ranked`:
about 40 ms on two CPU cores, where scoring every unit of the evidence would take seconds."""
LEARNED_WEIGHT = 0.25
"""What the scorer's probability adds to a unit's `answer_score` in the learned reader: the weight of
`bench/study_scorer.py`'s grid (0.25, 0.5, 1.0) that ranks the answering unit first most often on the
tuning split (docs/dev/scorer.md; the test split was not consulted)."""
LEARNED_ABSTAINS_BY = "rules"
"""Which score withholds the learned reader's answer: ``"rules"`` (support against `ABSTAIN_BELOW`), ``"scorer"`` (its
probability against the scorer's own threshold, set on its training data) or ``"either"`` (whichever falls short).
On the tuning split the scorer's threshold withheld 40 % of the answerable questions' answers (the rules: 8 %), so
the rules decide (docs/dev/reader.md)."""

_CLAUSE = re.compile(r"(?<=[;:])\s+|\s+(?=\((?!\d))|,\s+(?=(?:and|but|which|while|so)\b)")


@dataclass(frozen=True)
class Choice:
    """What the synthesizer would quote, how sure it is, and the question's names the evidence lacks."""

    units: tuple[UnitReading, ...]
    support: float
    ungrounded: tuple[str, ...] = ()
    unnegated: bool = False
    abstain_below: float = ABSTAIN_BELOW
    measure: str = "support"
    """What ``support`` is: the rules' ``"support"`` (against `ABSTAIN_BELOW`) or the learned scorer's
    ``"answer probability"`` (against its card's threshold, set on its training data)."""
    ranked: tuple[tuple[float, UnitReading], ...] = ()
    """The order it chose from, every unit with its score, best first (`weighed_units` shows the top of it)."""

    @property
    def abstains(self) -> bool:
        """No unit, a best unit below the threshold, a name of the question no evidence holds, or a
        question about what is not so that the quote does not negate (`answers_the_negation`)."""
        return not self.units or self.support < self.abstain_below or bool(self.ungrounded) or self.unnegated


def check_reader(name: str) -> str:
    """``name`` when it is a reader (`READERS`), else a `ValueError` naming the valid ones."""
    if name not in READERS:
        raise ValueError(f"unknown reader {name!r}; choose one of: {', '.join(READERS)} "
                         "(set CRAG_OFFLINE_READER or OfflineModel(reader=...))")
    return name


def answers_the_negation(query: str, kind: str | None, quoted: Sequence[str]) -> bool:
    """False when a question asks what is *not* so ("which region did not invent the machine gun?")
    and no quoted unit says that anything is not so: such a quote answers the positive question.

    A why-question is exempt (the reason something is not done is stated positively: "IAM-61 moved it
    to 8444"), and so is a question of several parts, whose negation belongs to one part only.

    >>> answers_the_negation("Which region did not invent it?", None, ["By 1880 it was in use."])
    False
    >>> answers_the_negation("Why does it not use 8443?", "reason", ["IAM-61 moved it to 8444."])
    True
    """
    if kind == "reason" or not negates(query) or question_parts(query):
        return True
    return any(negates(text) for text in quoted)


def check_lead(name: str) -> str:
    """``name`` when it is a lead (`LEADS`), else a `ValueError` naming the valid ones."""
    if name not in LEADS:
        raise ValueError(f"unknown lead {name!r}; choose one of: {', '.join(LEADS)} "
                         "(set CRAG_OFFLINE_LEAD or OfflineModel(lead=...))")
    return name


def answer_score(u: UnitReading, item_cos: float) -> float:
    """How well one unit answers: meaning, words, the asked kind and shape, a label naming what is
    asked, and its item's meaning."""
    kind = KIND_BONUS if u.holds is True else (-KIND_PENALTY if u.holds is False else 0.0)
    label = LABEL_BONUS if u.label_hit else 0.0
    shape = 0.0 if u.shaped is None else (SHAPE_WEIGHT if u.shaped else -SHAPE_WEIGHT)
    return u.cos + COVERAGE_WEIGHT * u.coverage + kind - question_penalty(u) + label + shape + ITEM_WEIGHT * item_cos


def ranked(reading: Reading) -> list[tuple[float, UnitReading]]:
    """Every unit of the evidence with its `answer_score`, best first (shorter first on a tie): the
    order `choose` quotes from, and the list `bench/study_reader_ceiling.py` asks a reader to pick from."""
    scored = [(answer_score(u, item.cos), u) for item in reading.items for u in item.units]
    return sorted(scored, key=lambda su: (-su[0], len(su[1].unit.text)))


def learned_ranked(reading: Reading, scorer: Any) -> tuple[list[tuple[float, UnitReading]], float]:
    """`ranked`, with its top `LEARNED_TOP_K` units re-ordered by ``answer_score + LEARNED_WEIGHT x p``,
    where ``p`` is the learned scorer's probability that the unit (keyed ``"Title: unit"``, as it was
    trained) answers the question; and the best ``p`` among them."""
    ordered = ranked(reading)
    head = ordered[:LEARNED_TOP_K]
    if not head:
        return ordered, 0.0
    titles = {item.n: item.title for item in reading.items}
    probs = [float(p) for p in scorer.predict([(reading.query, unit_key(titles.get(u.unit.n, ""), u.unit))
                                                for _, u in head])]
    rescored = [(score + LEARNED_WEIGHT * p, u) for (score, u), p in zip(head, probs, strict=True)]
    rescored.sort(key=lambda su: (-su[0], len(su[1].unit.text)))
    return rescored + ordered[LEARNED_TOP_K:], max(probs)


def choose(reading: Reading, scorer: Any = None, abstain_by: str | None = None) -> Choice:
    """The units to quote for ``reading``'s question: the best one, then one per further part.

    With a learned ``scorer`` (`crag_lab.learned.AnswerScorer`) the order is `learned_ranked`'s; with
    ``abstain_by="scorer"`` (default `LEARNED_ABSTAINS_BY`) the answer is withheld when the best unit's
    answer probability is below the scorer's own threshold (``scorer.card.abstain_below``, set on its
    training data's unanswerable questions), with ``"rules"`` when its support is below `ABSTAIN_BELOW`,
    with ``"either"`` when either falls short (the probability is what the choice reports when it does).
    """
    by = abstain_by or LEARNED_ABSTAINS_BY
    if by not in ("rules", "scorer", "either"):
        raise ValueError(f"abstain_by={by!r}: use 'rules', 'scorer' or 'either'")
    if scorer is None:
        ordered, learned = ranked(reading), None
    else:
        ordered, learned = learned_ranked(reading, scorer)
    if not ordered:
        return Choice((), 0.0)
    _, best = ordered[0]
    chosen = [best]
    # Close runners-up of the same item join the quote; when the best unit already holds the asked
    # kind of answer, only if they are not competing answers of that kind (sibling table rows).
    top = ordered[0][0]
    chosen += [u for score, u in ordered[1:] if u.unit.n == best.unit.n and score >= top - SAME_ITEM_MARGIN
               and (u.holds is None or u.holds is (best.holds is not True))][:SAME_ITEM_UNITS]
    for part in question_parts(reading.query):
        if len(chosen) >= MAX_UNITS:
            break
        part_best = _best_for_part(reading, part)
        if part_best is not None and all(part_best.unit.text != c.unit.text for c in chosen):
            chosen.append(part_best)
    other_side = parallel_fact(reading.query, ordered, chosen)
    if other_side is not None:
        chosen.append(other_side)
    unnegated = not answers_the_negation(reading.query, reading.kind, [u.unit.text for u in chosen])
    weighed = tuple(ordered)
    if learned is not None and (by == "scorer" or (by == "either" and learned < float(scorer.card.abstain_below))):
        return Choice(tuple(chosen), round(learned, 3), reading.ungrounded, unnegated,
                      float(scorer.card.abstain_below), "answer probability", weighed)
    return Choice(tuple(chosen), unit_support(best), reading.ungrounded, unnegated, ranked=weighed)


def parallel_fact(query: str, ordered: Sequence[tuple[float, UnitReading]],
                  chosen: Sequence[UnitReading]) -> UnitReading | None:
    """For a comparison, the best-ranked further unit that states the same labelled fact as the best one.

    A comparison ("which had the longer impact, A or B?", "compare the ports of A and B") is answered
    by both sides: when the best unit is labelled (``Duration of customer impact: 1 h 49 min``), the
    highest-ranked unit with the same labels, not yet quoted, is the other side's value. None for any
    other question, an unlabelled best unit, or no such unit.
    """
    if router.explain(query)[1] not in COMPARING_RULES or not chosen:
        return None
    labels = [label.lower() for label, _ in labelled(chosen[0].unit.text)]
    if not labels:
        return None
    quoted = {c.unit.text for c in chosen}
    return next((u for _, u in ordered if u.unit.text not in quoted
                 and [label.lower() for label, _ in labelled(u.unit.text)] == labels), None)


def _best_for_part(reading: Reading, part: str) -> UnitReading | None:
    terms = question_terms(part)
    kind = asks_for(part)
    best: tuple[float, UnitReading] | None = None
    for item in reading.items:
        for u in item.units:
            cov = coverage(terms, u.unit.terms, u.unit.context)
            has = holds(kind, u.unit.text, part)
            score = cov + (0.2 if has else (-0.15 if has is False else 0.0)) + 0.5 * u.cos
            if best is None or score > best[0]:
                best = (score, u)
    return best[1] if best is not None and best[0] >= PART_MIN_SUPPORT else None


def shortest_span(unit: UnitReading, kind: str | None, query: str) -> str:
    """The unit, trimmed to what answers: a labelled row to its answering pairs, a long unit to its clause.

    >>> from crag_lab.offline.units import Unit
    >>> u = UnitReading(Unit(1, "Owner: Payments Core; lead: Tiago Mendes (since 2023)", frozenset()), 0.5, 0.5, True)
    >>> shortest_span(u, None, "Who?")
    'Owner: Payments Core; lead: Tiago Mendes (since 2023)'
    """
    text = unit.unit.text.strip()
    row = answering_pairs(text, kind, query)
    if row is not None:
        return row
    if len(text) <= WIDE_UNIT_CHARS or kind is None:
        return text
    clauses = [c for c in _CLAUSE.split(text) if c.strip()]
    typed = [c for c in clauses if holds(kind, c, query)]
    return typed[0].strip(" ,;") if len(typed) == 1 else text


def answering_pairs(text: str, kind: str | None, query: str) -> str | None:
    """A labelled row of three or more pairs cut to the pairs that matter, or None to keep it whole.

    Kept: the first pair (what the row is about), pairs that answer — labelled with the asked kind
    (``Lead`` for who) or holding a thing of that kind — and pairs that tie the row to the question
    (a label or value the question names). Only a question that asks a kind is cut, and only when
    some pair answers it: otherwise nothing says which pairs are noise.

    >>> answering_pairs("Team: Payments; Lead: Tiago Mendes; Jira key: PAY; Budget: 3", "person", "Who leads Payments?")
    'Team: Payments; Lead: Tiago Mendes'
    >>> answering_pairs("Team: Payments; Lead: Tiago Mendes; Jira key: PAY", None, "What is Payments?") is None
    True
    """
    segments = text.split("; ")
    pairs = labelled(text)
    if kind is None or len(pairs) < 3 or len(pairs) != len(segments):
        return None
    terms = question_terms(query)
    asked = kind_labels(kind)
    keep, answers = [0], False
    for i, (label, value) in enumerate(pairs[1:], 1):
        label_terms = expand(content_terms(label))
        answering = bool(label_terms & asked) or bool(holds(kind, value, query))
        ties = any(has_term(t, label_terms) for t in terms) or any(
            echoes(v, terms) for v in expand(content_terms(value)))
        answers |= answering
        if answering or ties:
            keep.append(i)
    return "; ".join(segments[i] for i in keep) if answers and len(keep) < len(pairs) else None


LEAD_KINDS = frozenset({"person", "time", "quantity", "duration", "code"})
"""The answer kinds a short answer is taken for: a name, a date, a number, a duration, a code span.
A reason, or a thing the phrasing does not type ("what changed"), is answered by the quote alone."""


def short_answer(quote: str, kind: str | None, query: str) -> str | None:
    """The asked thing itself, as the quote writes it: the answer's bold lead, or None.

    Only for a one-part question: a question of several parts has several answers.
    The quote's things of the asked kind (`units.spans`) that the question does not already hold,
    narrowed to the asked finer shape (a version, a share, a command) when some have it. In a
    labelled row the first pair whose label names what is asked (``Lead`` for who, a label the
    question uses) and holds such a thing decides. Either way there must be exactly one candidate:
    nothing says which of several is meant (``9091 / 3001`` for one port). A quote that is the asked
    thing alone (a command line) has nothing to lead with; a lead keeps whole code spans (`markdown_lead`).

    >>> short_answer("Team: Payments; Lead: Tiago Mendes; Slack: #team-payments", "person", "Who leads Payments?")
    'Tiago Mendes'
    >>> short_answer("Public listener: 8443 (TLS)", "quantity", "Which port takes TLS traffic?")
    '8443'
    >>> short_answer("Ports 8443 and 8444 are open.", "quantity", "Which port is open?") is None
    True
    """
    if kind not in LEAD_KINDS or question_parts(query):
        return None
    asked_shape = shape_of(query, kind)
    in_question = found(kind, query)

    def candidates(text: str) -> list[str]:
        new = [s for s in spans(kind, text) if s.lower() not in in_question
               and s.split()[0].lower() not in STOPWORDS]  # "The Critical" is no name
        shaped = [s for s in new if asked_shape is not None and asked_shape.search(s)]
        return shaped or new

    found_in = candidates(quote)
    pairs = labelled(quote)
    if len(pairs) >= 2 and len(pairs) == len(quote.split("; ")):
        terms = question_terms(query)
        named = (candidates(value) for label, value in pairs if label_names_asked(label, terms, kind))
        found_in = next((c for c in named if c), found_in)
    return markdown_lead(found_in[0], quote) if len(found_in) == 1 else None


def reader_passage(item: ItemReading) -> str:
    """What the span reader reads of an item: ``"Title: units"``, its `READ_UNITS` best-supported units
    (`unit_support`) in the item's own order, one a line. A quote is always a unit, so the reader's
    answer must lie in one to be quoted; reading the likeliest few instead of the whole item takes
    fewer tokens, and the reader's time grows with them."""
    from crag_lab.learned.span_data import passage

    top = sorted(sorted(range(len(item.units)), key=lambda k: unit_support(item.units[k]), reverse=True)[:READ_UNITS])
    return passage(item.title, "\n".join(item.units[k].unit.text for k in top))


def span_lead(query: str, quote: str, item: ItemReading, reader: Any) -> str | None:
    """The span reader's answer to ``query`` in ``item`` when it lies inside ``quote`` and the reader
    says the item answers (its margin over "no answer" is positive); else None.

    Only for a one-part question (several parts have several answers), never the whole quote nor a label of its
    row, and widened to the code spans it cuts into (`markdown_lead`). ``reader`` is a `crag_lab.learned.SpanReader`;
    it reads the item's best units (`reader_passage`).
    """
    if question_parts(query):
        return None
    span = reader.read(query, [reader_passage(item)])[0]
    text = span.text.strip()
    return markdown_lead(text, quote) if span.margin > 0 and text and text in quote else None


def span_first(reading: Reading, reader: Any) -> tuple[UnitReading | None, str | None]:
    """The unit holding the span reader's best span over all the evidence (items read by `reader_passage`) when its
    margin reaches `SPAN_FIRST_MARGIN`, else None; and that span, its item, margin and the gate, for the answer's note."""
    if not reading.items:
        return None, None
    found = reader.read(reading.query, [reader_passage(item) for item in reading.items])
    best = max(range(len(found)), key=lambda k: found[k].margin)
    span = found[best]
    said = (f"{span.text.strip()!r} in item [{reading.items[best].n}], margin {span.margin:.1f} against gate "
            f"{SPAN_FIRST_MARGIN:g}") if span.text.strip() else None
    if span.margin < SPAN_FIRST_MARGIN or said is None:
        return None, said
    return next((u for u in reading.items[best].units if span.text in u.unit.text), None), said


def respond(query: str, evidence: Sequence[Mapping[str, object]], cache: VectorCache,
            scorer: Any = None, spans: Any = None, first_unit: bool = False,
            seen: Sequence[Mapping[str, object]] = (), doubter: Any = None,
            complexity: str | None = None) -> tuple[str, str | None]:
    """`read_answer`'s text and why, without the units it weighed."""
    said = read_answer(query, evidence, cache, scorer, spans, first_unit, seen, doubter, complexity)
    return said.text, said.why


def read_answer(query: str, evidence: Sequence[Mapping[str, object]], cache: VectorCache,
                scorer: Any = None, spans: Any = None, first_unit: bool = False,
                seen: Sequence[Mapping[str, object]] = (), doubter: Any = None,
                complexity: str | None = None) -> Answered:
    """The answer (`answer`), why, and the units weighed (`Answered`). Why: for the abstention sentence, why it
    abstains (`why_abstained`, `doubt.doubted`); for an answer, how it was read (the rules' best unit and its
    support; the span reader's best answer, its margin against the gate and whether it was quoted first; where the
    bold lead came from). A learned ``scorer`` re-ranks.

    With a span reader (``spans``, `crag_lab.learned.SpanReader`) and ``first_unit``, the unit holding its confident
    best span over all the evidence is quoted first, before the rules' choice (`span_first`: about 12 ms an item on
    two cores). The answer opens with the asked thing in bold when the first quote holds it (``**8443** — Public
    listener: `8443` (TLS) [1].``): the span reader's answer (`span_lead`), else the rules' (`short_answer`).
    Whether to answer is the rules' decision and, with a ``doubter`` (the doubt reader), the router's ``complexity``
    "simple" and a best unit of prose, also the doubt reader's (`crag_lab.offline.doubt`). ``seen``: items the
    run's grader dropped, never quoted; the names check counts their names (`read`)."""
    reading = read(query, evidence, cache, seen)
    choice = choose(reading, scorer)
    if choice.abstains:
        return Answered(NO_EVIDENCE_ANSWER, why_abstained(choice), weighed_units(choice.ranked))
    if doubter is not None and doubt.applies(complexity, choice.units[0].unit.text) and (
            doubts := doubt.doubted(query, [(i.n, reader_passage(i)) for i in reading.items], doubter)):
        return Answered(NO_EVIDENCE_ANSWER, doubts, weighed_units(choice.ranked))
    units = list(choice.units)
    first, said = span_first(reading, spans) if spans is not None and first_unit else (None, None)
    best = units[0]
    why = [f"the rules' best unit is in item [{best.unit.n}] (support {choice.support:.2f}, "
           f"{'ABSTAIN_BELOW' if choice.measure == 'support' else 'threshold'} {choice.abstain_below})"]
    if first is not None and first.unit.text != best.unit.text:
        units = [first, *(u for u in units if u.unit.text != first.unit.text)][:MAX_UNITS + 1]
        why.append(f"the span reader's best answer, {said}, is in another unit, quoted first")
    elif said:
        why.append(f"the span reader's best answer, {said}, "
                   + ("lies in the rules' unit" if first else "stays behind the rules' unit"))
    quotes = [shortest_span(unit, reading.kind, query).rstrip().removesuffix(".") for unit in units]
    body = " ".join(f"{text} [{unit.unit.n}]." for text, unit in zip(quotes, units, strict=True))
    lead = None
    if spans is not None:
        item = next((i for i in reading.items if i.n == units[0].unit.n), None)
        lead = span_lead(query, quotes[0], item, spans) if item is not None else None
    if lead:
        why.append("the bold lead is the span reader's")
    else:
        lead = short_answer(quotes[0], reading.kind, query)
        why.append("the bold lead is the one thing of the asked kind the quote holds" if lead else "no bold lead")
    return Answered(f"**{lead}** — {body}" if lead else body, "; ".join(why), weighed_units(choice.ranked, units))


def answer(query: str, evidence: Sequence[Mapping[str, object]], cache: VectorCache) -> str:
    """An extractive answer with ``[N]`` markers, or the abstention sentence."""
    return respond(query, evidence, cache)[0]


def why_abstained(choice: Choice) -> str:
    """Why ``choice`` abstains, in one clause for the trace (the ``model_abstained`` audit event)."""
    if choice.ungrounded:
        return f"the question names {', '.join(repr(n) for n in choice.ungrounded)}, which no evidence item holds"
    if not choice.units:
        return "no evidence item has a sentence, row or line to quote"
    best = choice.units[0].unit
    quoted = best.text if len(best.text) <= 80 else best.text[:77] + "..."
    if choice.unnegated and choice.support >= choice.abstain_below:
        return (f"the question asks what is not so, and its best-matching unit ({quoted!r}, item [{best.n}]) "
                "says nothing is not so")
    if choice.measure != "support":
        return (f"the learned scorer gives its best-matching unit ({quoted!r}, item [{best.n}]) answer "
                f"probability {choice.support:.2f}, below its threshold {choice.abstain_below}")
    return (f"its best-matching unit ({quoted!r}, item [{best.n}]) has support {choice.support:.2f}, "
            f"below ABSTAIN_BELOW {ABSTAIN_BELOW}")
