"""What people type to an assistant, for the learned router: the CLINC150 queries.

The router's questions come from SQuAD (encyclopedic, asked about the world) and its small talk from
chit-chat conversations, many of whose turns are personal questions ("what do you do for fun?"). A
question about the asker's own work looked like neither, and the token reader called it small talk:
"what do I do if the ledger consumers fall behind" (chitchat 0.89), "hey, quick one - who's on call
for payments this week?" (0.90). CLINC150 (Larson et al., EMNLP 2019; github.com/clinc/oos-eval,
CC BY 3.0) is 23,700 queries crowd workers wrote to a task assistant, 150 per intent in 10 domains and
1,200 outside them. Its ``small_talk`` domain (greetings, thanks, goodbyes, jokes, questions about the
assistant) and the meta answers yes, no and maybe are small talk (`CHITCHAT`). Every query of the
eight task domains (banking, credit cards, kitchen and dining, home, auto and commute, travel,
utility, work: "what do i do if i lose my card", "how many vacation days do i have left") and every
out-of-scope one ("who is the coach of the chicago bulls") is simple: it asks for facts, about the
asker's own things or the world, not for a reply in kind. The meta domain's settings commands (change
the volume, the accent, the assistant's name) are left out. The file is ``data/data_full.json``; its
train, val, test and out-of-scope splits are read alike (this project evaluates on none of them).
Validation holds out whole intents (`router_data.held_out` on the intent), so it measures intents
the router never saw; out-of-scope queries are held out one by one. Of each task intent's training queries
`SIMPLE_PER_INTENT` are drawn, so that the corpus adds about as many questions as small talk and does not shift the
router's prior towards questions.

>>> intent_class("greeting"), intent_class("report_lost_card"), intent_class("change_volume")
('chitchat', 'simple', None)
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

from crag_lab.learned import corpora
from crag_lab.learned.router_data import Message

SMALL_TALK = frozenset(("greeting", "goodbye", "thank_you", "tell_joke", "fun_fact", "meaning_of_life", "who_made_you",
                        "who_do_you_work_for", "do_you_have_pets", "what_are_your_hobbies", "what_is_your_name",
                        "where_are_you_from", "are_you_a_bot", "how_old_are_you", "what_can_i_ask_you"))
"""The intents of CLINC150's ``small_talk`` domain (its ``data/domains.json``)."""
CHITCHAT = SMALL_TALK | {"yes", "no", "maybe"}
"""Intents that are small talk: the small-talk domain, and a bare yes, no or maybe."""
META = frozenset(("change_speed", "user_name", "whisper_mode", "change_volume", "change_language", "repeat",
                  "change_accent", "cancel", "sync_device", "change_user_name", "change_ai_name", "reset_settings"))
"""The meta domain's other intents: commands to the assistant about itself, neither small talk nor a question."""
SIMPLE_PER_INTENT = 40
"""Training queries drawn per task intent (of about 135): 128 intents give about 5,100 questions, beside about 2,400
small-talk queries and 1,100 out of scope."""
SPLITS = ("train", "val", "test", "oos_train", "oos_val", "oos_test")


def intent_class(intent: str) -> str | None:
    """The router class of a CLINC150 intent's queries, or None for an intent left out."""
    return "chitchat" if intent in CHITCHAT else None if intent in META else "simple"


def read(path: str | Path) -> list[Message]:
    """Every query of the CLINC150 file at ``path`` (all its splits), in file order; ``source`` is ``clinc/<class>``,
    ``group`` the intent (held out together), or the query itself when it is out of scope."""
    raw = corpora.read_json(path, "--clinc", "data/data_full.json of github.com/clinc/oos-eval")
    if not isinstance(raw, dict) or "train" not in raw or not all(
            isinstance(pair, list) and len(pair) == 2 for split in SPLITS for pair in raw.get(split, [])):
        raise SystemExit(f"--clinc {path}: expected splits of [query, intent] pairs (\"train\", \"oos_train\", ...; "
                         "data/data_full.json of github.com/clinc/oos-eval)")
    out: list[Message] = []
    for split in SPLITS:
        for text, intent in raw.get(split, []):
            label = intent_class(str(intent))
            if label is None or not str(text).strip():
                continue
            group = f"clinc/oos/{text}" if intent == "oos" else f"clinc/{intent}"
            out.append(Message(str(text).strip(), label, f"clinc/{label}", group))
    return out


def split(messages: Iterable[Message], seed: int) -> tuple[list[Message], list[Message]]:
    """Training and validation messages (`corpora.split`: whole intents held out, a text once per split and under
    one class, training texts noised), with `SIMPLE_PER_INTENT` of each task intent's training queries drawn."""
    train, val = corpora.split(messages, seed)
    by_intent: dict[str, list[int]] = {}
    for i, m in enumerate(train):
        if m.label == "simple" and not m.group.startswith("clinc/oos/"):
            by_intent.setdefault(m.group, []).append(i)
    rng = random.Random(seed)
    kept = {i for group in sorted(by_intent) for i in (rng.sample(by_intent[group], SIMPLE_PER_INTENT)
                                                      if len(by_intent[group]) > SIMPLE_PER_INTENT else by_intent[group])}
    capped = {i for rows in by_intent.values() for i in rows}
    return [m for i, m in enumerate(train) if i in kept or i not in capped], val
