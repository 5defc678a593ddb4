"""Small talk and plain questions in many languages, for the learned router: the ChatterBot corpus.

The router's chit-chat corpus is English. A user greets in their own language ("Guten Morgen",
"привет"), and MiniLM's vector of such a message looked like nothing the head had seen: the shipped
head called "Guten Morgen" a question (simple 0.96). The ChatterBot corpus (PyPI ``chatterbot-corpus``,
BSD-3-Clause, user-contributed) holds short dialogues in 28 languages, one YAML file per topic::

    categories:
    - greetings
    conversations:
    - - Guten Morgen!
      - Hallo

Every turn of a small-talk topic (`SMALL_TALK`: greetings, conversations, feelings, the bot's profile,
jokes) is a chitchat message. The opening turn of an encyclopedic topic (`QUESTIONS`: trivia, science,
history, literature, computers) is a simple message, so that "not English" does not come to mean "small
talk". Topics that mix the two (AI, money, sports, films, politics, health, ...) are left out.
Validation holds out whole dialogues (a hash of language, topic and position, as for the other sources).

>>> topic_class("greetings.yml"), topic_class("trivia.yml"), topic_class("ai.yml")
('chitchat', 'simple', None)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from crag_lab.learned import corpora
from crag_lab.learned.router_data import Message

SMALL_TALK = frozenset(("greetings", "greeting", "conversations", "coversations", "emotion", "emotions", "emociones",
                        "botprofile", "perfilbot", "profile", "humor", "psychology", "psicologia", "compliment",
                        "food", "gossip"))
"""Topics whose every turn is small talk with a bot (file stems, some of them spelled in the corpus's languages)."""
QUESTIONS = frozenset(("trivia", "science", "history", "history_brasil", "literature", "computers", "computer"))
"""Encyclopedic topics: their dialogues open with a question about the world."""
QUESTION_REPEAT = 6
"""Each training question is seen this many times, each with its own surface noise: the corpus has about six
small-talk turns to a question, and a head that sees mostly small talk in a language learns the language."""
MAX_CHARS = 200
"""Longer turns are monologues, left out as in the English chit-chat corpus."""


def topic_class(filename: str) -> str | None:
    """The router class a topic file's messages get, or None for a topic left out."""
    stem = Path(filename).stem.lower()
    return "chitchat" if stem in SMALL_TALK else "simple" if stem in QUESTIONS else None


def _dialogues(path: Path) -> list[list[str]]:
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a ChatterBot corpus file ({exc.__class__.__name__}); give the corpus's data "
                         "folder (chatterbot_corpus/data of chatterbot-corpus)") from exc
    talks = raw.get("conversations") if isinstance(raw, dict) else None
    return [[str(turn).strip() for turn in talk if str(turn).strip()] for talk in talks or [] if isinstance(talk, list)]


def read(folder: str | Path) -> list[Message]:
    """Every message of the corpus in ``folder`` (its ``data`` folder: one sub-folder per language), in a
    fixed order; ``source`` is ``chatterbot/<language>``, ``group`` the dialogue."""
    root = Path(folder)
    files = sorted(root.glob("*/*.yml"))
    if not files:
        raise SystemExit(f"--chatterbot {folder}: no <language>/<topic>.yml files here; give the data folder of the "
                         "chatterbot-corpus package (pip download --no-deps chatterbot-corpus==1.3.3, then unzip)")
    out: list[Message] = []
    for path in files:
        label = topic_class(path.name)
        if label is None:
            continue
        language = path.parent.name
        for i, talk in enumerate(_dialogues(path)):
            turns = talk if label == "chitchat" else talk[:1]
            out += [Message(text, label, f"chatterbot/{language}", f"chatterbot/{language}/{path.stem}/{i}")
                    for text in turns if len(text) <= MAX_CHARS]
    return out


def split(messages: Iterable[Message], seed: int) -> tuple[list[Message], list[Message]]:
    """Training and validation messages (`corpora.split`: whole dialogues held out, a text once per split and under
    one class, training texts noised); each training question is seen `QUESTION_REPEAT` times."""
    return corpora.split(messages, seed, lambda m: QUESTION_REPEAT if m.label == "simple" else 1)
