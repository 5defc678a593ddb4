"""Messages in other languages go to the router trained with them (crag_lab/learned/router.py: `other_language`,
`LearnedRouter.other_languages`); English ones to the router that reads English, as before."""

from __future__ import annotations

import json
import shutil

import pytest

from crag_lab.learned.router import OTHER_LANGUAGES, ROUTER_DIR, LearnedRouter, fingerprint
from crag_lab.offline.router import analyze
from crag_lab.offline.spelling import other_language
from crag_lab.offline.vectors import VectorCache
from crag_lab.parsing import parse_analysis

# Written for this test; in no training or evaluation file.
ENGLISH = ["Which port does the billing-api listen on?", "thx, that helped a lot", "wich team ownz the audit exporter",
           "Compare the retention of access logs with that of audit logs.", "hey there, good to see you"]
OTHER = {"Привет, как дела?": "chitchat", "안녕하세요, 잘 지내세요?": "chitchat", "¿Quién escribió el libro que ganó "
         "el premio en 1998 y dónde nació su autor?": "complex", "Welche Stadt ist die Hauptstadt von Kanada?": "simple"}
"""The first three the English router gets wrong (simple, simple, simple); the last it gets right."""


@pytest.fixture(scope="module")
def vectors() -> VectorCache:
    return VectorCache()


@pytest.fixture(scope="module")
def english_only(tmp_path_factory: pytest.TempPathFactory) -> LearnedRouter:
    """The shipped router without the one for other languages: what shipped before it."""
    folder = tmp_path_factory.mktemp("english") / "router"
    shutil.copytree(ROUTER_DIR, folder, ignore=shutil.ignore_patterns(OTHER_LANGUAGES, "*.md"))
    return LearnedRouter.load(folder)


@pytest.mark.parametrize("text", ENGLISH)
def test_english_messages_typos_and_chat_included_are_read_as_english(text: str) -> None:
    assert not other_language(text)


@pytest.mark.parametrize("text", [*OTHER, "Dank je wel", "Vielen Dank für die Hilfe"])
def test_messages_in_other_languages_any_script_are_read_as_such(text: str) -> None:
    assert other_language(text)


def test_a_message_without_letters_is_read_as_english() -> None:
    assert not other_language("8443?") and not other_language("")


def test_english_messages_are_routed_exactly_as_by_the_english_router(english_only: LearnedRouter,
                                                                      vectors: VectorCache) -> None:
    shipped = LearnedRouter.load()
    assert shipped.other_languages is not None and english_only.other_languages is None
    for text in ENGLISH:
        route = shipped.route(text, vectors)
        assert route == english_only.route(text, vectors) and route.language == "english"


@pytest.mark.parametrize(("text", "label"), OTHER.items())
def test_messages_in_other_languages_are_routed_by_the_router_trained_with_them(text: str, label: str,
                                                                                 vectors: VectorCache) -> None:
    # Four messages, not a measure: bench/study_router.py measures both routers on held-out sets.
    shipped = LearnedRouter.load()
    route = shipped.route(text, vectors)
    assert route.language == "other" and route.complexity == label
    assert shipped.other_languages is not None
    assert route.probabilities == shipped.other_languages.route(text, vectors).probabilities


def test_the_plan_and_its_parse_say_which_router_decided(vectors: VectorCache) -> None:
    plan = analyze("Привет, как дела?", available=["vector_search"], vectors=vectors, router="learned")
    assert plan["router"]["language"] == "other" and plan["complexity"] == "chitchat"
    assert "language" not in analyze(ENGLISH[0], available=["vector_search"], vectors=vectors, router="learned")["router"]
    assert parse_analysis(json.dumps(plan), ["vector_search"])["router"]["language"] == "other"


def test_the_fingerprint_covers_the_router_for_other_languages(english_only: LearnedRouter) -> None:
    assert english_only.folder is not None
    before = fingerprint(english_only.folder)
    assert fingerprint() != before
    shutil.copytree(ROUTER_DIR / OTHER_LANGUAGES, english_only.folder / OTHER_LANGUAGES)
    try:
        assert fingerprint(english_only.folder) == fingerprint()
    finally:
        shutil.rmtree(english_only.folder / OTHER_LANGUAGES)


@pytest.mark.parametrize("text", ["Guten Morgen", "Tschüss, bis morgen!", "Ciao, come stai?"])
def test_a_short_message_of_words_english_also_has_is_read_as_english(text: str) -> None:
    # A limit, stated in the router's data card: "morgen", "bis", "ciao", "come" are in the English dictionary.
    assert not other_language(text)


def test_the_english_router_alone_got_three_of_them_wrong(english_only: LearnedRouter, vectors: VectorCache) -> None:
    wrong = [text for text, label in OTHER.items() if english_only.route(text, vectors).complexity != label]
    assert wrong == list(OTHER)[:3]
