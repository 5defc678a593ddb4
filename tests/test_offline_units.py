"""Units of evidence and answer kinds (crag_lab/offline/units.py)."""

from __future__ import annotations

import pytest

from crag_lab.offline.units import asks_for, holds, question_parts, table_row, units_of


def test_key_value_tables_lose_their_scaffolding() -> None:
    text = "| Field | Value |\n|---|---|\n| Applies to | public traffic |\n| Port | 8443 |"
    assert [u.text for u in units_of(1, text)] == ["Applies to: public traffic", "Port: 8443"]


def test_wide_tables_keep_their_headers_and_skip_empty_cells() -> None:
    assert table_row(["Service", "Port", "Owner"], ["card-router", "8450", ""]) == "Service: card-router; Port: 8450"


def test_headings_become_context_and_emphasis_is_dropped() -> None:
    units = units_of(3, "# Gateway\n\n## Ports\n\nThe **public** port is 8443.", "Gateway")
    assert [u.text for u in units] == ["The public port is 8443."]
    assert units[0].heading == "Ports" and "port" in units[0].context and units[0].n == 3


def test_code_lines_are_units_and_bare_links_are_not() -> None:
    units = units_of(1, "```bash\nmake release\n```\n\n- [See the runbook](runbooks/x.md)")
    assert [u.text for u in units] == ["`make release`"]


@pytest.mark.parametrize(("question", "kind"), [
    ("Who leads the payments team?", "person"),
    ("gateway TLS port?", "quantity"),
    ("How many partitions does the topic have?", "quantity"),
    ("When is the change freeze?", "time"),
    ("How long are traces kept?", "duration"),
    ("Which command rolls back a release?", "code"),
    ("Why did we leave RabbitMQ?", "reason"),
    ("What is the ledger?", None),
])
def test_answer_kind_from_phrasing(question: str, kind: str | None) -> None:
    assert asks_for(question) == kind


def test_a_unit_holds_a_kind_only_with_something_new() -> None:
    assert holds("quantity", "Port: 8443", "Which port?") is True
    assert holds("quantity", "Port 8443 is public.", "Is port 8443 public?") is False
    assert holds(None, "anything", "What is it?") is None


@pytest.mark.parametrize(("text", "found"), [
    ("The secret syncs every 15 minutes.", True), ("Shifts change every Monday.", True),
    ("Reports go out every other week.", True), ("It runs nightly.", True),
    ("Every secret used by a service lives in Vault.", False), ("Every team runs a schedule.", False),
])
def test_every_is_a_frequency_only_before_a_time_unit(text: str, found: bool) -> None:
    # "every secret" is no answer to "how often"; "every 15 minutes" is.
    assert holds("duration", text, "How often does it happen?") is found


@pytest.mark.parametrize(("text", "found"), [
    ("Date: 2022-06-14", True), ("The call starts at 09:30.", True), ("Effective 14.06.2022.", True),
    ("Decision: CloudEvents 1.0, JSON", False), ("Runs on Kafka 3.2.", False), ("Tool: uv; Version: 0.4.20", False),
    ("Egress IP: 203.0.113.20", False),
])
def test_a_dotted_version_or_address_is_no_date(text: str, found: bool) -> None:
    # "When was it decided?" is answered by the date row, not by the row naming CloudEvents 1.0.
    assert holds("time", text, "When was the event format decided?") is found


def test_question_parts() -> None:
    assert question_parts("Which team owns it, and in which channel do I reach them?") == [
        "Which team owns it", "in which channel do I reach them"]
    assert question_parts("Which port does the gateway use?") == []
