"""Reading a misspelt question the way the knowledge base spells it (the offline model only).

One slip of the keyboard ("trafffic", "allowde", "identiy-service") cost the offline model a sixth of
its answers: a word the evidence does not hold matches no unit, no BM25 term, and trips the names
check, which then abstains. Before it reads a question, the offline model looks up each word that is
neither in the knowledge base nor in an English dictionary (SymSpell's, from the ``symspellpy``
package, MIT) among the knowledge base's own words (`symspellpy.SymSpell`, Damerau distance): one
edit away for a word of up to seven letters, two for a longer one, the most frequent on a tie, none
when two candidates are equally good. Words of three letters or fewer and words with capitals after
the first letter (acronyms, ``CamelCase`` names) or an apostrophe are left as typed, and so are a
known word with a common ending or beginning ("rebalances" when the knowledge base says "rebalance")
and a capitalised word inside a sentence (a name: one letter from a name is usually another name). A word that exists, in the
knowledge base or in English, is never changed: "payment" in a question about "payments-service"
stays "payment", so a question about something the knowledge base does not hold still reads as one.

>>> speller = Speller({"traffic": 3, "tls": 2, "gateway": 5, "identity": 4, "service": 9})
>>> text, changed = speller.correct("Which port takes TLS trafffic on the gatway of identiy-service?")
>>> text
'Which port takes TLS traffic on the gateway of identity-service?'
>>> changed
(('trafffic', 'traffic'), ('gatway', 'gateway'), ('identiy', 'identity'))
>>> speller.correct("Who runs the Zorblax cluster?")  # nothing near enough: left as typed
('Who runs the Zorblax cluster?', ())
>>> speller.correct("Does Gatway own it? Gatway?")  # a name inside a sentence stays; at its start it is read
('Does Gatway own it? Gateway?', (('Gatway', 'Gateway'),))
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crag_lab.kb import KnowledgeBase

WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
"""A word: letters, with an apostrophe inside ("doesn't" is one word, and never corrected)."""
SUFFIXES = ("s", "es", "d", "ed", "ing", "er", "ers", "ly")
"""A word that is a known word with one of these endings is known too ("rebalances", "chargebacks")."""
PREFIXES = ("re", "un", "pre", "non", "co", "sub")
"""Likewise a known word after one of these beginnings ("rebranded")."""
MIN_LENGTH = 4
"""Shorter words are left as typed: one edit turns most of them into another word."""
LONG = 8
"""From this length on, a word may be two edits from the knowledge base's spelling (one below it)."""
ENGLISH_MIN_SHARE = 0.5
"""A message is read as English when at least this share of its words are English words (`other_language`)."""
_ANY_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
"""A word in any script, with an apostrophe inside."""


@functools.lru_cache(maxsize=1)
def english() -> frozenset[str]:
    """The words of SymSpell's English frequency dictionary (82,765 words), lower case."""
    text = resources.files("symspellpy").joinpath("frequency_dictionary_en_82_765.txt").read_text(encoding="utf-8")
    return frozenset(line.split(" ", 1)[0] for line in text.splitlines() if line)


def other_language(text: str, known: Callable[[str], bool] | None = None) -> bool:
    """Whether a message is written in another language than English: fewer than `ENGLISH_MIN_SHARE` of its
    words (letters of any script; words with an apostrophe are not counted) are English words, which ``known``
    decides for a lower-case word (default: in the English dictionary, `english`). A message without such words
    is read as English. The speller leaves such a message as typed (its own ``known`` adds the knowledge base's
    words and the misspelt ones it can read), and the learned router hands it to its router for other
    languages (`crag_lab.learned.router`).

    >>> other_language("Gracias por tu ayuda"), other_language("привет"), other_language("wats the port for the gatewy")
    (True, True, False)
    >>> other_language("What didn't Newton's mechanics affext?"), other_language("8443?")
    (False, False)
    """
    words = [w.lower() for w in _ANY_WORD.findall(text) if "'" not in w and "’" not in w]
    is_english = known or english().__contains__
    return bool(words) and sum(map(is_english, words)) < ENGLISH_MIN_SHARE * len(words)


def vocabulary(texts: Iterable[str]) -> Counter[str]:
    """How often each word (lower case, letters only) occurs in ``texts``."""
    return Counter(w.lower() for text in texts for w in re.findall(r"[A-Za-z]+", text))


def _sentence_start(text: str, at: int) -> bool:
    """Whether position ``at`` of ``text`` begins a sentence (nothing before it but spaces, quotes, or an end mark)."""
    before = text[:at].rstrip(" \t\"'(")
    return not before or before[-1] in ".?!:;\n"


def of_knowledge_base(kb: KnowledgeBase) -> Speller:
    """A `Speller` of ``kb``'s words: its chunks' text, titles and paths."""
    return Speller(vocabulary(text for c in kb.chunks for text in (c.text, c.title, c.path)))


class Speller:
    """Corrects a question's unknown words to the knowledge base's spelling (see the module docstring)."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        from symspellpy import SymSpell

        self.known = frozenset(counts) | english()
        self._symspell = SymSpell(max_dictionary_edit_distance=2, prefix_length=7)
        for word, count in counts.items():
            if len(word) >= MIN_LENGTH - 1:
                self._symspell.create_dictionary_entry(word, int(count))

    def is_known(self, lower: str) -> bool:
        """Whether a lower-case word is in the knowledge base or in English, as it is or with one of `SUFFIXES`."""
        stems = {lower} | {lower[len(start):] for start in PREFIXES if lower.startswith(start)}
        return any(stem in self.known or any(stem.endswith(end) and stem[:-len(end)] in self.known for end in SUFFIXES)
                   for stem in stems)

    def reads_as_english(self, lower: str) -> bool:
        """Whether a lower-case word counts as English for `other_language`: known (`is_known`), or misspelt and
        readable with the knowledge base's spelling (`suggestion`), so that typos do not make a question foreign."""
        return self.is_known(lower) or self.suggestion(lower) is not None

    def suggestion(self, word: str) -> str | None:
        """The knowledge base's spelling of ``word`` (lower case), or None when it is known or nothing fits."""
        from symspellpy import Verbosity

        lower = word.lower()
        if len(word) < MIN_LENGTH or "'" in word or any(c.isupper() for c in word[1:]) or self.is_known(lower):
            return None
        found = self._symspell.lookup(lower, Verbosity.CLOSEST, max_edit_distance=2 if len(word) >= LONG else 1)
        if not found or (len(found) > 1 and found[1].count == found[0].count):
            return None
        return str(found[0].term)

    def correct(self, question: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        """``question`` with its unknown words spelled as the knowledge base spells them, and what changed. A
        capitalised word inside a sentence is a name, left as typed: one letter from a name is usually another
        name ("Trafford", "Strafford"). A message in another language (`other_language`) is left as typed: its
        words are not misspelt English."""
        if other_language(question, self.reads_as_english):
            return question, ()
        changed: list[tuple[str, str]] = []

        def fix(m: re.Match[str]) -> str:
            word = m.group(0)
            if word[0].isupper() and not _sentence_start(question, m.start()):
                return word
            better = self.suggestion(word)
            if better is None:
                return word
            better = better.capitalize() if word[0].isupper() else better
            changed.append((word, better))
            return better

        return WORD.sub(fix, question), tuple(changed)
