"""Misspelt questions read with the knowledge base's spelling (crag_lab/offline/spelling.py, OfflineModel.spelled)."""

from __future__ import annotations

import json

import pytest

from crag_lab.kb import KnowledgeBase
from crag_lab.offline import OfflineModel
from crag_lab.offline.spelling import Speller, vocabulary

# Written for this test; in no training or evaluation file.
KB_TEXT = ("# Gateway\n\nThe api-gateway accepts public TLS traffic on port 8443.\n"
           "Idempotency keys are remembered for 24 hours by payments-service.\n"
           "The reconciliation worker rebalances partitions nightly.\n")


@pytest.fixture(scope="module")
def speller() -> Speller:
    return Speller(vocabulary([KB_TEXT, "gateway.md"]))


@pytest.mark.parametrize(("typed", "read"), [
    ("Which port takes public TLS trafffic?", "Which port takes public TLS traffic?"),   # a letter doubled
    ("How long are idempotnecy keys kept?", "How long are idempotency keys kept?"),    # two letters swapped
    ("When does the reconciliation wroker run?", "When does the reconciliation worker run?"),
    ("Idemotency keys: how long?", "Idempotency keys: how long?"),                       # at a sentence's start
    ("who owns api-gatewy", "who owns api-gateway"),                                    # inside an identifier
])
def test_a_misspelt_word_is_read_as_the_knowledge_base_spells_it(speller: Speller, typed: str, read: str) -> None:
    assert speller.correct(typed)[0] == read


@pytest.mark.parametrize("question", [
    "Does payment-service keep idempotency keys?",       # a real word near a knowledge-base name: another thing
    "Which port takes public TLS traffic?",               # nothing misspelt
    "Why doesn't the worker rebalance partitions?",       # an apostrophe; a known word with an ending
    "Is the gateway's prt open?",                         # three letters and fewer are left as typed
    "Who is on call for the TLSv gateway?",               # an acronym-like word
    "Did Gatewey Ltd build the api-gateway?",             # a capitalised word inside a sentence is a name
    "What does the Zorblaxian worker do?",                # nothing near enough
])
def test_known_words_short_words_and_names_are_left_as_typed(speller: Speller, question: str) -> None:
    assert speller.correct(question) == (question, ())


def test_two_equally_good_spellings_leave_the_word_as_typed() -> None:
    speller = Speller({"worker": 3, "walker": 3})
    assert speller.correct("is the wolker up?")[1] == ()
    assert Speller({"worker": 3, "walker": 1}).correct("is the wolker up?")[0] == "is the worker up?"


def test_a_message_in_another_language_is_left_as_typed() -> None:
    speller = Speller({"gateway": 3, "puerto": 1, "traffic": 2})
    assert speller.correct("Gatway traffic?")[0] == "Gateway traffic?"  # English: read with the KB's spelling
    assert speller.correct("¿Cual puerta usa el gatway?") == ("¿Cual puerta usa el gatway?", ())  # Spanish: as typed


def test_typos_and_the_knowledge_base_s_own_words_do_not_make_a_short_question_foreign() -> None:
    # In English words alone ("port") this is one word in three; with the KB's "tls" and the readable "gatewy", three.
    speller = Speller({"gateway": 3, "tls": 2})
    assert speller.correct("gatewy TLS port?") == ("gateway TLS port?", (("gatewy", "gateway"),))


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, embed_model) -> OfflineModel:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("kb")
    (root / "gateway.md").write_text(KB_TEXT, encoding="utf-8")
    return OfflineModel(embed_model, kb=KnowledgeBase.build(root, embed_model=embed_model), spelling=True)


def test_the_offline_model_plans_grades_and_answers_the_question_as_respelt(model: OfflineModel,
                                                                         embed_model) -> None:  # type: ignore[no-untyped-def]
    typed, clean = "Which port takes public TLS trafffic?", "Which port takes public TLS traffic?"
    plan = json.loads(model.complete("plan", "", {"query": typed, "available_tools": ["vector_search"]}).text)
    assert plan == [{"tool": "vector_search", "args": {"query": clean, "top_k": 5}}]
    item = {"text": KB_TEXT, "path": "gateway.md", "line": 1, "line_end": 5, "title": "Gateway", "score": 0.7}
    assert model.complete("grade", "", {"query": typed, "items": [item]}).text == \
        model.complete("grade", "", {"query": clean, "items": [item]}).text
    evidence = [{**item, "id": "gateway.md:1-5", "relevance": 0.9}]
    typed_reply = model.complete("synthesize", "", {"query": typed, "kind": "answer", "evidence": evidence})
    clean_reply = model.complete("synthesize", "", {"query": clean, "kind": "answer", "evidence": evidence})
    assert typed_reply.text == clean_reply.text and "8443" in typed_reply.text
    assert typed_reply.note is not None and typed_reply.note.startswith(
        "read 'trafffic' as 'traffic' (the knowledge base's spelling); ")
    assert clean_reply.note is not None and "knowledge base's spelling" not in clean_reply.note


def test_spelling_is_part_of_the_model_s_identity_and_can_be_turned_off(model: OfflineModel, embed_model,  # type: ignore[no-untyped-def]
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert model.cache_identity()["spelling"]
    monkeypatch.setenv("CRAG_OFFLINE_SPELLING", "0")
    off = OfflineModel(embed_model, kb=model._kb)
    assert "spelling" not in off.cache_identity()
    assert off.spelled("public TLS trafffic") == ("public TLS trafffic", ())
    assert OfflineModel(embed_model).spelled("public TLS trafffic") == ("public TLS trafffic", ())  # no knowledge base


def test_vocabulary_counts_lower_case_words() -> None:
    assert vocabulary(["The gateway, the Gateway; api-gateway 8443"]) == {"the": 2, "gateway": 3, "api": 1}
