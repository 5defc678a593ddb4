"""Reading and splitting the router's corpora beside its own (`chatterbot_data`, `mintaka_data`, `clinc_data`) one way.

>>> from crag_lab.learned.router_data import Message
>>> one = [Message("hola", "chitchat", "x", "g1"), Message("hola", "simple", "x", "g2"), Message("hej", "chitchat", "x", "g3")]
>>> [m.text for m in unique(one)], [m.text for ms in split(one, seed=13) for m in ms]
(['hola', 'hej'], ['hej'])
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from crag_lab.learned.router_data import Message, _noise, held_out


def read_json(path: str | Path, option: str, source: str) -> Any:
    """The JSON in ``path``, or one clear line naming the option and the file it wants (``source``) when it cannot
    be read."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{option} {path}: not a readable JSON file ({exc.__class__.__name__}); give {source}") from exc


def unique(messages: Iterable[Message]) -> list[Message]:
    """Each text once, its first message kept."""
    seen: dict[str, Message] = {}
    for m in messages:
        seen.setdefault(m.text, m)
    return list(seen.values())


def split(messages: Iterable[Message], seed: int,
          repeat: Callable[[Message], int] = lambda m: 1) -> tuple[list[Message], list[Message]]:
    """Training and validation messages: whole groups held out (`router_data.held_out`), a text once per split,
    never in both, and never under two classes; training texts get the surface noise every source gets
    (`router_data._noise`), each ``repeat(message)`` times with its own noise, validation texts none."""
    messages = list(messages)
    labels: dict[str, set[str]] = {}
    for m in messages:
        labels.setdefault(m.text, set()).add(m.label)
    kept = [m for m in messages if len(labels[m.text]) == 1]
    val = unique(m for m in kept if held_out(m.group))
    val_texts = {m.text for m in val}
    rng = random.Random(seed)
    noised = [Message(_noise(m.text, rng), m.label, m.source, m.group)
              for m in kept if not held_out(m.group) and m.text not in val_texts for _ in range(repeat(m))]
    return unique(noised), val
