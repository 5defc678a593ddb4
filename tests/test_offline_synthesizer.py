"""The offline synthesizer (crag_lab/offline/synthesizer.py): quote what answers, cite only that, or abstain."""

from __future__ import annotations

import json

import pytest

from crag_lab import CragConfig, ModelReply, build_graph
from crag_lab.graph import initial_state
from crag_lab.offline import OfflineModel
from crag_lab.offline.reading import UnitReading, label_answers, read
from crag_lab.offline.replies import chitchat
from crag_lab.offline.synthesizer import (
    ABSTAIN_BELOW,
    LABEL_BONUS,
    answer,
    answer_score,
    read_answer,
    respond,
    short_answer,
)
from crag_lab.offline.text import content_terms
from crag_lab.offline.units import Unit, question_terms
from crag_lab.offline.vectors import VectorCache
from crag_lab.offline.weighed import WEIGHED_UNITS
from crag_lab.prompts import NO_EVIDENCE_ANSWER
from crag_lab.result import AskResult
from crag_lab.testing import StaticTool

GATEWAY = {"n": 1, "title": "api-gateway", "path": "services/api-gateway/README.md",
           "text": "# api-gateway\n\n| Field | Value |\n|---|---|\n| Applies to | public traffic |\n"
                   "| Public TLS port | 8443 |\n| Admin port | 9000 |"}
RUNBOOK = {"n": 2, "title": "Certificate rotation", "path": "runbooks/certs.md",
           "text": "# Certificate rotation\n\nCertificates are rotated every 90 days by the platform team.\n\n"
                   "Run `gwctl certs rotate --env prod` to rotate them."}
TEAM = {"n": 3, "title": "Teams", "path": "architecture/overview.md",
        "text": "## Teams\n\n| Team | Lead | Channel |\n|---|---|---|\n| Payments Core | Tiago Mendes | #payments-core |"}


@pytest.fixture(scope="module")
def vectors() -> VectorCache:
    return VectorCache()


def test_a_number_question_quotes_the_row_without_table_scaffolding(vectors: VectorCache) -> None:
    text = answer("On which port does the api-gateway accept public TLS traffic?", [RUNBOOK, GATEWAY, TEAM], vectors)
    assert "8443" in text and "[1]" in text
    assert "[2]" not in text and "[3]" not in text  # only the item that supports the answer is cited
    assert "Field:" not in text and "Value:" not in text


def test_a_who_question_quotes_a_person(vectors: VectorCache) -> None:
    text = answer("Who leads Payments Core?", [GATEWAY, TEAM, RUNBOOK], vectors)
    assert "Tiago Mendes" in text and text.endswith("[3].")


def test_a_command_question_quotes_the_command(vectors: VectorCache) -> None:
    text = answer("Which command rotates the gateway certificates?", [GATEWAY, RUNBOOK], vectors)
    assert "gwctl certs rotate" in text and "[2]" in text


ACCESS = {"n": 1, "title": "Certificate rotation", "path": "runbooks/certs.md",
          "text": "# Certificate rotation\n\nTo rotate the gateway certificates you need the role `certs-operator`.\n\n"
                  "Since 2024 the gateway certificates are rotated with `gwctl certs rotate` and a hot reload."}


def test_a_how_do_i_question_quotes_a_command_with_arguments_not_a_lone_identifier(vectors: VectorCache) -> None:
    # The role sentence matches the question's words better; only a code span with arguments is a command.
    text = answer("How do I rotate the gateway certificates?", [ACCESS], vectors)
    assert "gwctl certs rotate" in text and "certs-operator" not in text


TOPICS = [{"n": 1, "title": "payment.events.v1", "path": "platform/kafka.md",
           "text": "# payment.events.v1\n\n- Retention: 14 days\n- Partitions: 24"},
          {"n": 2, "title": "invoice.overdue.v1", "path": "platform/kafka.md",
           "text": "# invoice.overdue.v1\n\n- Retention: 7 days\n- Partitions: 6"}]


def test_a_comparison_quotes_the_same_labelled_fact_for_both_sides(vectors: VectorCache) -> None:
    text = answer("Which topic has the longer retention, payment.events.v1 or invoice.overdue.v1?", TOPICS, vectors)
    assert "Retention: 14 days [1]" in text and "Retention: 7 days [2]" in text
    # One fact asked about one side: one side quoted.
    assert "[2]" not in answer("What is the retention of payment.events.v1?", TOPICS, vectors)


PROXY = {"n": 1, "title": "search-proxy", "path": "services/search-proxy/README.md",
         "text": "# search-proxy\n\n| Variable | Default | Meaning |\n|---|---|---|\n"
                 "| `PROXY_ELASTICSEARCH_URL` | `https://elasticsearch.proxy:9200` | Elasticsearch endpoint |\n\n"
                 "- Backend: Elasticsearch 8.14 (two data nodes)"}


def test_a_version_question_quotes_a_version_not_a_url_with_a_port(vectors: VectorCache) -> None:
    assert answer("Which Elasticsearch version backs search-proxy?", [PROXY], vectors) == (
        "**8.14** — Backend: Elasticsearch 8.14 (two data nodes) [1].")


def test_a_row_labelled_with_the_asked_attribute_outranks_one_that_restates_the_subject() -> None:
    query = "The service that consumes billing.export.v3: what language is it written in?"
    terms = question_terms(query)
    rows = [Unit(1, text, frozenset(content_terms(text))) for text in
            ("Consumes: `billing.export.v3`", "Language: Kotlin 2.0, Ktor")]
    restates, names = (UnitReading(u, 0.6, 0.4, None, label_answers(u.text, terms, None)) for u in rows)
    assert (restates.label_hit, names.label_hit) == (False, True)
    assert answer_score(names, 0.5) - answer_score(restates, 0.5) == pytest.approx(LABEL_BONUS)


def test_a_wide_row_is_cut_to_the_pairs_that_answer(vectors: VectorCache) -> None:
    teams = {"n": 1, "title": "Teams", "path": "org/teams.md",
             "text": "| Team | Lead | Slack | Jira key | Headcount |\n|---|---|---|---|---|\n"
                     "| Billing | Ana Costa | #team-billing | BIL | 6 |\n| Search | Joe Park | #team-search | SRC | 4 |"}
    # kept: the row's subject, the pair that answers (Lead), a pair naming what the question names
    # (#team-billing); dropped: the Jira key and the headcount
    assert answer("Who leads the Billing team?", [teams], vectors) == (
        "**Ana Costa** — Team: Billing; Lead: Ana Costa; Slack: #team-billing [1].")
    # no asked kind, nothing says which pairs are noise: the row stays whole
    assert answer("Tell me about the Billing team", [teams], vectors).startswith(
        "Team: Billing; Lead: Ana Costa; Slack: #team-billing; Jira key: BIL; Headcount: 6 [1].")


def test_an_answer_opens_with_the_asked_thing_when_the_quote_holds_exactly_one(vectors: VectorCache) -> None:
    # who => the person, which port => the number, from the quote; the quote stays, with its citation
    assert answer("Who leads Payments Core?", [TEAM], vectors).startswith("**Tiago Mendes** — Team: Payments Core")
    assert answer("On which port does the api-gateway accept public TLS traffic?", [GATEWAY], vectors) == (
        "**8443** — Public TLS port: 8443 [1].")
    # the labelled pair the question names decides between the row's numbers
    row = "Step: 2; SEV1: after 5 min without ack; SEV2: after 15 min without ack"
    assert short_answer(row, "duration", "How long until the secondary is paged for a SEV2?") == "15 min"
    # several things of the asked kind and nothing to choose between them: no lead, the quote alone
    assert short_answer("Port: 9091 / 3001 / 3100", "quantity", "Which port does Grafana use?") is None
    assert short_answer("Ports 8443 and 8444 are open.", "quantity", "Which port is open?") is None
    # a value the question already holds is no answer; a capitalised phrase opening with "The" is no name
    assert short_answer("Port 8443 moved to 8444.", "quantity", "Where did port 8443 move?") == "8444"
    assert short_answer("The Critical deadline is owned by Ana Costa.", "person", "Who owns it?") == "Ana Costa"
    # a quote that is the asked thing and nothing else is not repeated as its own lead
    block = {"n": 1, "title": "Certificate rotation", "path": "runbooks/certs.md",
             "text": "# Certificate rotation\n\n```bash\ngwctl certs rotate --env prod\n```"}
    assert answer("Which command rotates the certificates?", [block], vectors) == "`gwctl certs rotate --env prod` [1]."
    # no typed kind (what changed), a reason, or a question of several parts: no lead
    assert short_answer("Status: Superseded by ADR-0009", None, "What changed?") is None
    assert short_answer("It failed because the index was missing.", "reason", "Why did it fail?") is None
    assert short_answer("Lead: Ana Costa; Slack: #billing", "person",
                        "Who leads Billing, and in which Slack channel do I reach them?") is None


def test_evidence_about_something_else_gives_the_abstention(vectors: VectorCache) -> None:
    assert answer("What is the disaster-recovery RPO of the search service?", [TEAM], vectors) == NO_EVIDENCE_ANSWER
    assert answer("Which port?", [], vectors) == NO_EVIDENCE_ANSWER


ACQUIRERS = {"n": 1, "title": "card-router", "path": "services/card-router/README.md",
             "text": "# card-router\n\n| Card scheme | Default acquirer |\n|---|---|\n"
                     "| Visa | acq-north |\n| Mastercard | acq-south |"}


def test_a_question_naming_what_no_evidence_names_gets_the_abstention(vectors: VectorCache) -> None:
    # The table is about the right thing (schemes and their acquirers) but never names Maestro.
    assert read("Which acquirer is the default for Maestro cards?", [ACQUIRERS], vectors).ungrounded == ("Maestro",)
    assert answer("Which acquirer is the default for Maestro cards?", [ACQUIRERS], vectors) == NO_EVIDENCE_ANSWER
    # The same question about a scheme the table names is answered; a month is no name (dates are numbers).
    assert "acq-south [1]" in answer("Which acquirer is the default for Mastercard cards since March?",
                                     [ACQUIRERS], vectors)
    # A one-letter slip in a long name still names the scheme; a different number is a different thing.
    assert "acq-south [1]" in answer("Which acquirer is the default for Mastercad cards?", [ACQUIRERS], vectors)
    assert read("Which acquirer serves port 7071?", [ACQUIRERS], vectors).ungrounded == ("7071",)
    # A shortened name still names the thing: Postgres for PostgreSQL.
    storage = {"n": 1, "title": "Storage", "path": "architecture/storage.md",
               "text": "# Storage\n\nAll services run on PostgreSQL 16 in production."}
    assert answer("Which Postgres version runs in production?", [storage], vectors) == (
        "**16** — All services run on PostgreSQL 16 in production [1].")


def test_a_question_about_what_is_not_so_needs_a_quote_that_negates(vectors: VectorCache) -> None:
    listener = {"n": 1, "title": "api-gateway", "path": "services/api-gateway/README.md",
                "text": "# api-gateway\n\nThe gateway listens on port 8443 for public TLS traffic."}
    assert answer("Which port does the gateway listen on for public TLS traffic?", [listener], vectors).startswith("**8443**")
    # the quote answers the positive question, not the negated one
    text, why = respond("Which port does the gateway not listen on for public TLS traffic?", [listener], vectors)
    assert text == NO_EVIDENCE_ANSWER and why is not None and "not so" in why
    # a quote that does negate answers it
    closed = {**listener, "text": "# api-gateway\n\nThe gateway no longer listens on port 80 for public traffic."}
    assert answer("Which port does the gateway not listen on for public traffic any more?",
                  [closed], vectors).startswith("**80**")
    # a negation inside a condition sets the scene, it is not what is asked
    assert answer("Which port does the gateway listen on for public TLS traffic if a client has no certificate?",
                  [listener], vectors).startswith("**8443**")


def test_the_trace_says_why_the_offline_model_abstained(vectors: VectorCache) -> None:
    assert respond("Which acquirer is the default for Maestro cards?", [ACQUIRERS], vectors) == (
        NO_EVIDENCE_ANSWER, "the question names 'Maestro', which no evidence item holds")
    text, how = respond("Which acquirer is the default for Mastercard cards?", [ACQUIRERS], vectors)
    assert text != NO_EVIDENCE_ANSWER and how is not None and how.startswith("the rules' best unit is in item [1] (support ")
    weak = respond("How is the search service recovered after a disaster?", [TEAM], vectors)[1]
    assert weak is not None and "below ABSTAIN_BELOW 0.75" in weak and "item [3]" in weak
    # Through the graph: the synthesize node's model_abstained event carries the model's reason.
    row = {"text": ACQUIRERS["text"], "path": ACQUIRERS["path"], "line": 1, "line_end": 6, "score": 0.5,
           "title": ACQUIRERS["title"]}
    config = CragConfig()
    graph = build_graph(OfflineModel(), [StaticTool("vector_search", [row])], config)
    state = graph.invoke(initial_state("Which acquirer is the default for Maestro cards?"),
                         {"recursion_limit": config.recursion_limit})
    [event] = [e for e in state["audit"] if e["event"] == "model_abstained"]
    assert event["reason"].endswith("the question names 'Maestro', which no evidence item holds")


@pytest.mark.parametrize(("message", "word"), [
    ("thanks a lot!", "welcome"), ("sorry, my mistake", "problem"), ("bye!", "Goodbye"), ("hello", "Hello"),
])
def test_chitchat_replies_fit_the_message(message: str, word: str) -> None:
    assert word in chitchat(message)


MAESTRO = {"n": 2, "title": "Card brands", "path": "payments/brands.md",
           "text": "Maestro is the debit brand of the card network; its cards are routed like the network's credit cards."}


def test_a_name_held_only_by_an_item_the_grader_dropped_is_known_but_never_quoted(vectors: VectorCache) -> None:
    question = "Which acquirer is the default for Maestro cards?"
    assert read(question, [ACQUIRERS], vectors).ungrounded == ("Maestro",)
    assert read(question, [ACQUIRERS], vectors, seen=[MAESTRO]).ungrounded == ()
    assert read(question, [ACQUIRERS], vectors, seen=[{"text": "Visa cards only.", "title": "Maestro"}]).ungrounded == ()
    text, how = respond(question, [ACQUIRERS], vectors, seen=[MAESTRO])
    assert "Maestro" not in (how or "")
    assert "[2]" not in text and "debit brand" not in text  # a dropped item is never read for the answer


class _GradesFirstOnly(OfflineModel):
    """The offline model, but its grader keeps the first item and drops the rest; it keeps every synthesize input."""

    def __init__(self) -> None:
        super().__init__()
        self.synthesized: list[dict] = []

    def complete(self, task, prompt, inputs):  # type: ignore[no-untyped-def]
        if task == "grade":
            scores = [0.95] + [0.05] * (len(inputs["items"]) - 1)
            return ModelReply(json.dumps(scores), 1, 1)
        if task == "synthesize":
            self.synthesized.append(dict(inputs))
        return super().complete(task, prompt, inputs)


def test_the_graph_tells_the_synthesizer_which_items_its_grader_dropped() -> None:
    rows = [{"text": item["text"], "path": item["path"], "line": 1, "line_end": 6, "score": s, "title": item["title"]}
            for item, s in ((ACQUIRERS, 0.6), (MAESTRO, 0.5))]
    config = CragConfig(routing=False, prefilter=False)  # two items would be approved unread
    model = _GradesFirstOnly()
    state = build_graph(model, [StaticTool("vector_search", rows)], config).invoke(
        initial_state("Which acquirer is the default for Maestro cards?"), {"recursion_limit": config.recursion_limit})
    assert [i["path"] for i in state["context"]] == [ACQUIRERS["path"]]
    assert MAESTRO["path"] in {i["path"] for i in state["dropped"]}
    [inputs] = model.synthesized
    assert [e["path"] for e in inputs["evidence"]] == [ACQUIRERS["path"]]
    assert {s["title"] for s in inputs["seen"]} == {MAESTRO["title"]}
    assert not [e for e in state["audit"] if e["event"] == "model_abstained" and "Maestro" in e.get("reason", "")]


class _GradesAllHigh(OfflineModel):
    """The offline model, but its grader keeps every item."""

    def complete(self, task, prompt, inputs):  # type: ignore[no-untyped-def]
        if task == "grade":
            return ModelReply(json.dumps([0.95] * len(inputs["items"])), 1, 1)
        return super().complete(task, prompt, inputs)


def test_the_answer_note_says_which_citation_each_item_became() -> None:
    rows = [{"text": item["text"], "path": item["path"], "line": 1, "line_end": 6, "score": s, "title": item["title"]}
            for item, s in ((TEAM, 0.6), (ACQUIRERS, 0.5))]
    config = CragConfig(routing=False, prefilter=False)
    state = build_graph(_GradesAllHigh(), [StaticTool("vector_search", rows)], config).invoke(
        initial_state("Which acquirer is the default for Mastercard cards?"), {"recursion_limit": config.recursion_limit})
    n = [i["path"] for i in state["context"]].index(ACQUIRERS["path"]) + 1
    assert n == 2  # the answering item is not the first: the answer renumbers it
    assert [c["path"] for c in state["citations"]] == [ACQUIRERS["path"]] and "[1]" in state["answer"]
    [event] = [e for e in state["audit"] if e["event"] == "answer_read"]
    assert event["why"].startswith(f"the rules' best unit is in item [{n}] (cited as [1]) (support ")


def test_the_trace_lists_the_units_weighed_with_their_scores_and_which_were_quoted(vectors: VectorCache) -> None:
    question = "On which port does the api-gateway accept public TLS traffic?"
    said = read_answer(question, [RUNBOOK, GATEWAY, TEAM], vectors)
    assert (said.text, said.why) == respond(question, [RUNBOOK, GATEWAY, TEAM], vectors)
    units = said.weighed
    assert [u["rank"] for u in units] == list(range(1, WEIGHED_UNITS + 1))
    assert [u["score"] for u in units] == sorted((u["score"] for u in units), reverse=True)
    best = units[0]
    assert best["quoted"] and best["item"] == 1 and "8443" in best["unit"]  # the quoted row heads the list
    assert f"support {best['support']:.2f}" in str(said.why)  # the note's support is the listed unit's
    assert not any(u["quoted"] for u in units[1:] if "8443" not in u["unit"])
    # An abstention lists what it weighed too, none quoted, the best below the threshold it names.
    weak = read_answer("How is the search service recovered after a disaster?", [TEAM], vectors)
    assert weak.text == NO_EVIDENCE_ANSWER and weak.weighed and not any(u["quoted"] for u in weak.weighed)
    assert weak.weighed[0]["support"] < ABSTAIN_BELOW and f"support {weak.weighed[0]['support']:.2f}" in str(weak.why)


def test_the_graphs_trace_says_which_citation_each_weighed_unit_became() -> None:
    rows = [{"text": item["text"], "path": item["path"], "line": 1, "line_end": 6, "score": s, "title": item["title"]}
            for item, s in ((TEAM, 0.6), (ACQUIRERS, 0.5))]
    config = CragConfig(routing=False, prefilter=False)
    question = "Which acquirer is the default for Mastercard cards?"
    state = build_graph(_GradesAllHigh(), [StaticTool("vector_search", rows)], config).invoke(
        initial_state(question), {"recursion_limit": config.recursion_limit})
    [event] = [e for e in state["audit"] if e["event"] == "answer_read"]
    ids = {i["path"]: i["id"] for i in state["context"]}
    quoted = [u for u in event["units"] if u["quoted"]]
    assert quoted and all(u["id"] == ids[ACQUIRERS["path"]] and u["cited"] == 1 for u in quoted)
    assert all(u["cited"] is None for u in event["units"] if u["id"] == ids[TEAM["path"]])
    weighed = AskResult(question, "knowledge_base", state["answer"], state).weighed
    assert not weighed.abstained and weighed.why == event["why"] and list(weighed.units) == event["units"]
    table = weighed.to_markdown()
    assert table.startswith("**Answered:** the rules' best unit is in item [2] (cited as [1])")
    assert f"| 1 | {quoted[0]['score']:.2f} | {quoted[0]['support']:.2f} | [2] {ids[ACQUIRERS['path']]} | [1] | yes |" in table
    shown = weighed._repr_html_()  # in a notebook: the same rows, in a box that scrolls instead of widening the page
    assert shown.startswith("<p><b>Answered:</b> the rules' best unit is in item [2]") and 'class="crag-scroll"' in shown
    assert shown.count("</tr>") == len(weighed.units) + 1 and ids[ACQUIRERS["path"]] in shown


class _DropsMaestroEveryRound(_GradesFirstOnly):
    """Grades the acquirers item 0.5 (not enough: the loop searches again) and every other item 0.05."""

    def complete(self, task, prompt, inputs):  # type: ignore[no-untyped-def]
        if task == "grade":
            return ModelReply(json.dumps([0.5 if "acquirer" in i["text"] else 0.05 for i in inputs["items"]]), 1, 1)
        return super().complete(task, prompt, inputs)


def test_an_item_dropped_in_several_rounds_is_told_to_the_synthesizer_once() -> None:
    rows = [{"text": item["text"], "path": item["path"], "line": 1, "line_end": 6, "score": s, "title": item["title"]}
            for item, s in ((ACQUIRERS, 0.6), (MAESTRO, 0.5))]
    config = CragConfig(routing=False, prefilter=False)
    model = _DropsMaestroEveryRound()
    state = build_graph(model, [StaticTool("vector_search", rows), StaticTool("keyword_search", rows)], config).invoke(
        initial_state("Which acquirer is the default for Maestro cards?"), {"recursion_limit": config.recursion_limit})
    dropped = [i["id"] for i in state["dropped"]]
    assert len(dropped) > len(set(dropped)) == 1  # dropped in more than one round
    [inputs] = model.synthesized
    assert [s["title"] for s in inputs["seen"]] == [MAESTRO["title"]]

