"""The span reader: its training examples, its windows and targets, the reader that ships, and the bold
lead it gives an offline answer (CRAG_OFFLINE_LEAD=spans, the default)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from crag_lab.learned import Span, SpanReader
from crag_lab.learned.fit_spans import MAX_ANSWER_TOKENS, best_spans, targets, windows
from crag_lab.learned.span_data import (
    answerable,
    build,
    doc_examples,
    passage,
    read_examples,
    write_examples,
)
from crag_lab.learned.spans import NO_SPAN, SPANS_DIR
from crag_lab.offline import OfflineModel
from crag_lab.offline.leads import markdown_lead
from crag_lab.offline.reading import read
from crag_lab.offline.synthesizer import READ_UNITS, reader_passage, respond, span_lead
from crag_lab.offline.vectors import VectorCache

ROWS = [
    {"id": "Gate/p0/q0", "title": "Gate_Way", "question": "Which port does the gateway listen on?",
     "context": "The gateway listens on port 8443. It terminates TLS.", "answers": ["8443"], "answer_starts": [28]},
    {"id": "Gate/p1/q0", "title": "Gate_Way", "question": "Who maintains the gateway?",
     "context": "The platform team maintains the gateway since 2021.", "answers": ["The platform team"], "answer_starts": [0]},
    {"id": "Cats/p0/q0", "title": "Cats", "question": "What do cats do when happy?",
     "context": "Cats purr when they are happy.", "answers": ["purr"], "answer_starts": [5]},
]


def test_an_answerable_example_points_at_its_answer_after_the_title() -> None:
    ex = answerable(ROWS[0])
    assert ex is not None and ex.passage.startswith("Gate Way: ")
    assert ex.passage[ex.start:ex.start + len(ex.answer)] == "8443"
    assert answerable({**ROWS[0], "answer_starts": [3]}) is None  # an offset that does not hold the answer


def test_unanswerable_examples_never_hold_the_answer_and_near_misses_stay_in_their_article() -> None:
    examples = build(ROWS, [{**ROWS[2], "is_impossible": True, "question": "Why do cats bark?"}],
                     near_share=1.0, other_share=1.0, seed=1)
    assert sum(e.source == "squad11" for e in examples) == 3
    for e in examples:
        if e.start < 0:
            assert e.answer == "" and e.source in ("same-article", "other-article", "squad2-unanswerable")
    near = [e for e in examples if e.source == "same-article"]
    assert near and all(e.passage.startswith("Gate Way: ") for e in near)
    assert all("8443" not in e.passage for e in near if e.question == ROWS[0]["question"])
    assert [e.question for e in examples if e.source == "squad2-unanswerable"] == ["Why do cats bark?"]


def test_documentation_examples_answer_with_the_cell_or_value_as_written() -> None:
    readme = ("# Tool\n\n## Settings\n\n| Name | Port | Owner |\n|---|---|---|\n| gateway | 8443 | platform |\n"
              "| billing | 9091 | payments |\n\n- **Timeout:** thirty seconds by default\n\n## Install\n\n"
              "```bash\npip install tool\n```\n")
    examples = doc_examples("tool", readme, seed=0, near_share=1.0)
    answered = [e for e in examples if e.start >= 0]
    assert answered
    for e in answered:
        assert e.passage[e.start:e.start + len(e.answer)] == e.answer
    assert any(e.answer == "pip install tool" for e in answered)
    answers = {e.question: e.answer for e in answered}
    unanswered = [e for e in examples if e.start < 0]
    assert unanswered and all(e.source == "docs-unanswerable" and answers[e.question] not in e.passage for e in unanswered)


def test_examples_survive_a_round_trip_and_the_same_examples_give_the_same_bytes(tmp_path: Path) -> None:
    import time

    examples = [e for e in build(ROWS, seed=0)]
    write_examples(tmp_path / "x.json.gz", examples)
    assert read_examples(tmp_path / "x.json.gz") == examples
    time.sleep(1.1)  # a time stamp in the header (whole seconds) would now differ
    write_examples(tmp_path / "other name.json.gz", examples)  # no time stamp or file name in the header
    assert (tmp_path / "other name.json.gz").read_bytes() == (tmp_path / "x.json.gz").read_bytes()


@pytest.fixture(scope="module")
def reader() -> SpanReader:
    return SpanReader.load()


def test_windows_point_at_the_answer_or_at_cls_when_they_cannot_see_it(reader: SpanReader) -> None:
    tok = reader._tokenizer
    long_text = "Filler sentence number one. " * 60 + "The gateway listens on port 8443."
    rows = [("Which port?", passage("Gate", long_text), len("Gate: ") + long_text.index("8443"), "8443", "x"),
            ("Which port?", passage("Gate", "Nothing to see."), -1, "", "x")]
    enc = windows(tok, [r[0] for r in rows], [r[1] for r in rows], max_length=64, stride=16)
    labels = targets(enc, rows)
    owners = list(enc["overflow_to_sample_mapping"])
    assert owners.count(0) > 1  # the long passage is read in several windows
    hits = [(i, s, e) for i, (s, e) in enumerate(labels) if s]
    assert len(hits) >= 1 and all(owners[i] == 0 for i, _, _ in hits)
    for i, s, e in hits:
        offsets = enc["offset_mapping"][i]
        assert rows[0][1][offsets[s][0]:offsets[e][1]] == "8443"
    assert all(labels[i] == (0, 0) for i in range(len(labels)) if owners[i] == 1)


def test_best_spans_stay_in_the_passage_and_are_not_too_long() -> None:
    seq = [None, 0, 0, None, 1, 1, 1, None]
    offsets = [(0, 0), (0, 5), (6, 9), (0, 0), (0, 3), (4, 8), (9, 12), (0, 0)]
    start = [5.0, 9.0, 0.0, 0.0, 1.0, 3.0, 0.0, 0.0]  # the question's token 1 scores best: never a span
    end = [5.0, 0.0, 9.0, 0.0, 0.0, 0.0, 2.0, 0.0]
    null, spans = best_spans(start, end, offsets, seq)
    assert null == 10.0
    assert spans[0] == (5.0, 4, 12) and all(s >= 0 and e <= 12 for _, s, e in spans)
    assert MAX_ANSWER_TOKENS >= 10


def test_only_the_adapter_head_and_card_ship_and_they_are_small() -> None:
    assert sorted(p.name for p in SPANS_DIR.iterdir() if p.name != "__pycache__") == [
        "DATA_CARD.md", "adapter_config.json", "adapter_model.safetensors", "spans.json"]
    assert (SPANS_DIR / "adapter_model.safetensors").stat().st_size < 4_000_000


def test_the_shipped_reader_finds_the_answer_and_says_when_a_passage_has_none(reader: SpanReader) -> None:
    question = "Which port does the gateway listen on?"
    found = reader.read(question, ["Gateway: The gateway listens on port 8443. It terminates TLS.",
                                   "Cats: Cats purr when they are happy.", "  "])
    assert found[0].text == "8443" and found[0].margin > 0
    assert found[1].margin < 0 < found[0].margin
    assert found[2] == NO_SPAN
    assert reader.read(question, ["Cats: Cats purr when they are happy."]) == [found[1]]  # same reading, memo or not


def test_a_folder_without_a_trained_reader_names_itself_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"spans\.json: no trained span reader here; train one with"):
        SpanReader.load(tmp_path)


class FakeSpans:
    """A span reader that finds ``text`` with ``margin`` in every passage; it records what it read."""

    def __init__(self, text: str, margin: float) -> None:
        self.text, self.margin = text, margin
        self.read_passages: list[str] = []

    def read(self, question: str, passages: Sequence[str]) -> list[Span]:
        self.read_passages += list(passages)
        return [Span(self.text, max(p.find(self.text), 0), max(p.find(self.text), 0) + len(self.text), self.margin)
                for p in passages]


RUNBOOK = {"n": 1, "title": "Certificate rotation", "path": "runbooks/certs.md",
           "text": "Certificates are rotated every 90 days by the platform team."}
QUESTION = "How often are certificates rotated?"


def test_the_span_lead_is_the_readers_answer_inside_the_first_quote() -> None:
    spans = FakeSpans("every 90 days", 3.0)
    text, _ = respond(QUESTION, [RUNBOOK], VectorCache(), spans=spans)
    assert text.startswith("**every 90 days** — Certificates are rotated every 90 days")
    assert set(spans.read_passages) == {"Certificate rotation: " + RUNBOOK["text"]}


def test_the_reader_reads_an_items_best_units_in_their_own_order() -> None:
    filler = [f"The {w} team meets on Fridays." for w in ("design", "sales", "legal", "support", "finance")]
    text = " ".join([filler[0], "Certificates are rotated every 90 days.", *filler[1:3],
                     "Rotation is announced in the certs channel.", *filler[3:]])
    item = read(QUESTION, [{"n": 1, "title": "Certificate rotation", "text": text}], VectorCache()).items[0]
    assert len(item.units) == 7 and READ_UNITS < 7
    lines = reader_passage(item).removeprefix("Certificate rotation: ").split("\n")
    assert len(lines) == READ_UNITS and "Certificates are rotated every 90 days." in lines
    assert "Rotation is announced in the certs channel." in lines
    assert lines == [u.unit.text for u in item.units if u.unit.text in lines]  # the item's order, not the ranking


def test_no_span_lead_when_the_reader_doubts_or_points_outside_the_quote() -> None:
    quote = RUNBOOK["text"].removesuffix(".")
    item = read(QUESTION, [RUNBOOK], VectorCache()).items[0]
    assert span_lead(QUESTION, quote, item, FakeSpans("every 90 days", -0.5)) is None
    assert span_lead(QUESTION, quote, item, FakeSpans("Certificate rotation", 4.0)) is None  # the title
    assert span_lead(QUESTION, quote, item, FakeSpans(quote, 4.0)) is None  # the whole quote adds nothing
    assert span_lead("How often are certificates rotated, and in which channel is rotation announced?", quote,
                     item, FakeSpans("every 90 days", 4.0)) is None  # two parts, two answers
    rules = respond(QUESTION, [RUNBOOK], VectorCache(), spans=FakeSpans("every 90 days", -0.5))[0]
    assert rules == respond(QUESTION, [RUNBOOK], VectorCache())[0]  # the rules' own lead, or none


def test_a_lead_cut_through_a_code_span_is_widened_so_the_answer_renders() -> None:
    keys = {"n": 1, "title": "API keys", "path": "security/keys.md",
            "text": "Prefix: `nv_live_` (production), `nv_test_` (sandbox)"}
    question = "What prefix do sandbox API keys have?"
    text, _ = respond(question, [keys], VectorCache(), spans=FakeSpans("nv_test_`", 5.0))  # the reader's cut
    lead = text.split(" — ")[0]
    assert lead == "**`nv_test_`**"
    assert text.count("`") % 2 == 0  # every code span of the answer closes
    assert markdown_lead("a` and `b", "run `a` and `b` first") == "`a` and `b`"  # two spans cut: both widened
    assert markdown_lead("make test", "run `make test` first") == "make test"  # inside one span: as it is


def test_a_rows_label_is_never_the_lead() -> None:
    row = {"n": 1, "title": "ledger-service", "path": "services/ledger.md",
           "text": "Owning team: Ledger (#team-ledger, Jira `LED`)"}
    question = "Who owns the ledger service?"
    text, why = respond(question, [row], VectorCache(), spans=FakeSpans("Owning team", 5.0))
    assert not text.startswith("**Owning team**")
    assert "the bold lead is the span reader's" not in why
    assert markdown_lead("owning team", "Owning team: Ledger; Language: Java") is None  # any case


def test_a_confident_span_elsewhere_is_quoted_first_and_the_rules_choice_stays() -> None:
    from crag_lab.offline.synthesizer import SPAN_FIRST_MARGIN

    rotation = {"n": 1, "title": "Certificate rotation", "path": "runbooks/certs.md",
                "text": "Certificates are rotated every 90 days by the platform team."}
    schedule = {"n": 2, "title": "Maintenance", "path": "ops/maintenance.md",
                "text": "The next rotation window opens on 2025-03-02."}

    class OnlyIn(FakeSpans):
        def read(self, question: str, passages: Sequence[str]) -> list[Span]:
            found = super().read(question, passages)
            return [s if self.text in p else Span("", 0, 0, -3.0) for s, p in zip(found, passages, strict=True)]

    rules = respond(QUESTION, [rotation, schedule], VectorCache())[0]
    assert rules.split(" [")[0].endswith("Certificates are rotated every 90 days by the platform team")
    confident = OnlyIn("2025-03-02", SPAN_FIRST_MARGIN)
    first = respond(QUESTION, [rotation, schedule], VectorCache(), spans=confident, first_unit=True)
    assert first[0].startswith("**2025-03-02** — The next rotation window opens on 2025-03-02 [2]. Certificates")
    gate = f"against gate {SPAN_FIRST_MARGIN:g}"
    assert first[1] is not None and f"'2025-03-02' in item [2], margin {SPAN_FIRST_MARGIN:.1f} {gate}, is in another unit, " \
        "quoted first" in first[1]
    assert "[2]" not in respond(QUESTION, [rotation, schedule], VectorCache(), spans=confident)[0].split(".")[0]  # only asked
    doubtful, note = respond(QUESTION, [rotation, schedule], VectorCache(),
                             spans=OnlyIn("2025-03-02", SPAN_FIRST_MARGIN - 1), first_unit=True)
    assert "[2]" not in doubtful.split(".")[0]
    assert note is not None and f"margin {SPAN_FIRST_MARGIN - 1:.1f} {gate}, stays behind the rules' unit" in note
    unanswerable = respond("What is the maximum upload size?", [rotation], VectorCache(), spans=OnlyIn("90 days", 9.0),
                           first_unit=True)
    assert unanswerable == respond("What is the maximum upload size?", [rotation], VectorCache())  # the rules abstain


def test_the_lead_setting_is_part_of_the_models_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    from crag_lab.learned.spans import fingerprint

    assert OfflineModel().lead == "spans" and OfflineModel().span_first
    assert OfflineModel().cache_identity()["spans"] == fingerprint()
    assert OfflineModel().cache_identity()["span_units"] == str(READ_UNITS)
    assert "span_first" not in OfflineModel().cache_identity()
    monkeypatch.setenv("CRAG_OFFLINE_SPAN_FIRST", "0")
    assert not OfflineModel().span_first and OfflineModel().cache_identity()["span_first"] == "off"
    assert not OfflineModel(lead="rules").span_first  # nothing to quote first without the reader
    monkeypatch.setenv("CRAG_OFFLINE_LEAD", "rules")
    assert OfflineModel().lead == "rules"
    assert "spans" not in OfflineModel().cache_identity() and "lead" not in OfflineModel().cache_identity()
    with pytest.raises(ValueError, match=r"unknown lead 'bold'; choose one of: spans, rules"):
        OfflineModel(lead="bold")
    from crag_lab._preflight import check_settings
    from crag_lab.errors import SettingsError

    monkeypatch.setenv("CRAG_OFFLINE_LEAD", "bold")
    with pytest.raises(SettingsError, match=r"CRAG_OFFLINE_LEAD='bold'.*'spans' or 'rules'"):
        check_settings("no-such-file.env")


def test_the_offline_model_answers_with_the_shipped_readers_lead() -> None:
    reply = OfflineModel().complete("synthesize", "", {"query": "Which port does the gateway listen on?", "evidence": [
        {"n": 1, "title": "Gateway", "text": "The public gateway listens on port 8443 and terminates TLS there."}]})
    assert reply.text.startswith("**8443** — ") and "[1]" in reply.text


ARTICLE = [
    "The bridge opened in 1932. Its largest span is 503 metres, built by Dorman Long.",
    "In 1998 the Harbour Trust repainted it; Paul Hogan worked on the arch before that.",
]


def test_perturbed_questions_ask_what_their_own_paragraph_does_not_say() -> None:
    import random

    from crag_lab.learned.span_data import perturbed

    row = {"title": "Harbour_Bridge", "context": ARTICLE[0], "answers": ["1932"], "answer_starts": [23]}
    seen: dict[str, str] = {}
    for seed in range(40):
        for question in ("When did the bridge open in 1932?", "What is the largest span?", "When did the bridge open?"):
            ex = perturbed({**row, "question": question}, ARTICLE, random.Random(seed))
            assert ex is not None and ex.start == -1 and ex.answer == "" and ex.passage == "Harbour Bridge: " + ARTICLE[0]
            seen[ex.source] = ex.question
    assert seen["perturbed-entity"] in ("When did the bridge open in 1998?", "When did the bridge open in Harbour Trust?",
                                        "When did the bridge open in Paul Hogan?")
    assert seen["perturbed-antonym"] == "What is the smallest span?"
    assert seen["perturbed-negation"] in ("When didn't the bridge open?", "When didn't the bridge open in 1932?")
    assert perturbed({**row, "question": "Why bridges?"}, ARTICLE, random.Random(0)) is None  # no way applies


def test_perturbing_adds_unanswerable_twins_and_leaves_the_rest_as_it_was() -> None:
    plain = build(ROWS, near_share=1.0, other_share=1.0, seed=3)
    assert build(ROWS, near_share=1.0, other_share=1.0, perturb_share=0.0, seed=3) == plain
    twins = build(ROWS, near_share=1.0, other_share=1.0, perturb_share=1.0, seed=3)
    assert [e for e in twins if not e.source.startswith("perturbed-")] == plain
    added = [e for e in twins if e.source.startswith("perturbed-")]
    assert added and all(e.start == -1 and e.question not in {r["question"] for r in ROWS} for e in added)


def test_a_long_passage_read_beside_short_ones_gives_the_spans_each_gives_alone(reader: SpanReader) -> None:
    question = "Which port does the gateway listen on?"
    table = "Ports: " + " ".join(f"| service-{k} | {9000 + k} | internal |" for k in range(40))
    passages = ["Gateway: The gateway listens on port 8443.", table, "Cats: Cats purr when they are happy.",
                "Gateway: Health checks use port 8081."]
    shapes: list[tuple[int, int]] = []
    model = reader._model
    reader._memo.clear()
    try:
        reader._model = lambda **batch: shapes.append(tuple(batch["input_ids"].shape)) or model(**batch)
        together = reader.read(question, passages)
    finally:
        reader._model = model
    assert min(shapes, key=lambda shape: shape[1]) == (3, 22)  # the short passages are not padded to the table's width
    alone = []
    for text in passages:
        reader._memo.clear()
        alone.append(reader.read(question, [text])[0])
    assert [s.text for s in together] == [s.text for s in alone]
    assert together[0].text == "8443"
    assert all(abs(a.margin - b.margin) <= 1e-3 for a, b in zip(together, alone, strict=True))
