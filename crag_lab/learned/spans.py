"""The span reader: an extractive reader that finds the answer's exact words in a passage, or says none is there.

It is the bundled all-MiniLM-L6-v2 (`crag_lab.embeddings.model_dir`, no hub access) with a LoRA
adapter and a start/end head per token (`peft`, `AutoModelForQuestionAnswering`), trained by
``crag_lab/learned/fit_spans.py`` on SQuAD v1.1 train with unanswerable examples made from it (the
data card, ``crag_lab/_data/spans/DATA_CARD.md``). Only the adapter and head ship; loading merges
them into the base weights once, on CPU, in eval mode, so the same passages always give the same spans.

A passage is ``"Title: text"`` (`crag_lab.learned.span_data.passage`). For each, `SpanReader.read`
gives the best span and its *margin*: the span's score (start logit + end logit) minus the score of
pointing at ``[CLS]``, the reader's "no answer here". A positive margin says the passage answers;
margins compare passages of one question (the answering passage has the highest).

>>> reader = SpanReader.load()  # doctest: +SKIP
>>> reader.read("Which port does the gateway use?", ["Gateway: The gateway listens on port 8443."])[0].text
... # doctest: +SKIP
'8443'
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crag_lab.embeddings import model_dir

SPANS_DIR = Path(__file__).resolve().parent.parent / "_data" / "spans"
"""Where the trained adapter, head and data card ship."""
DOUBT_DIR = SPANS_DIR.parent / "doubt"
"""The doubt reader (`crag_lab.offline.doubt`): a span reader trained with written unanswerable questions too; its card
holds ``abstain_margin``."""
CARD_FILE = "spans.json"
MEMO_SIZE = 20_000
"""How many (question, passage) readings `SpanReader.read` remembers (least recently used go first)."""


@dataclass(frozen=True)
class Span:
    """The best answer in one passage: ``passage[start:end] == text``; ``margin`` over no answer."""

    text: str
    start: int
    end: int
    margin: float


NO_SPAN = Span("", 0, 0, float("-inf"))


class SpanReader:
    """One verb: ``read(question, passages) -> [Span]``. Build it with `load` (cached per folder)."""

    def __init__(self, model: Any, tokenizer: Any, card: dict[str, Any]) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self.card = card
        self.max_length = int(card["max_length"])
        self.stride = int(card["stride"])
        self._memo: OrderedDict[tuple[str, str], Span] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def load(folder: str | Path | None = None) -> SpanReader:
        """The reader in ``folder`` (default: the one that ships), loaded once per process."""
        return _load(str(Path(folder or SPANS_DIR).resolve()))

    def read(self, question: str, passages: Sequence[str], batch_size: int = 32) -> list[Span]:
        """The best span of each passage for ``question``, in order (`NO_SPAN` for an empty passage).

        A passage longer than the reader's window is read in overlapping windows; its span is the best
        of any window, and its no-answer score the lowest (a window that cannot see the answer says
        "none here"). Margins are rounded to 4 places, so float noise never reorders equal readings.
        """
        import torch

        from crag_lab.learned.batching import length_batches
        from crag_lab.learned.fit_spans import best_spans, windows

        out: dict[int, Span] = {}
        todo = []
        with self._lock:
            for i, text in enumerate(passages):
                known = self._memo.get((question, text))
                if known is not None:
                    self._memo.move_to_end((question, text))
                    out[i] = known
                elif text.strip():
                    todo.append(i)
                else:
                    out[i] = NO_SPAN
        if todo:
            enc = windows(self._tokenizer, [question] * len(todo), [passages[i] for i in todo],
                          max_length=self.max_length, stride=self.stride)
            readings: dict[int, tuple[float, list[tuple[float, int, int]]]] = {}
            keys = ["input_ids", "attention_mask", "token_type_ids"]
            with torch.inference_mode():  # windows of like length together: less padding (`length_batches`)
                for ids in length_batches([len(x) for x in enc["input_ids"]], batch_size):
                    padded = self._tokenizer.pad({k: [enc[k][w] for w in ids] for k in keys}, return_tensors="pt")
                    result = self._model(**padded)
                    starts, ends = result.start_logits.tolist(), result.end_logits.tolist()  # plain floats: fast to sort
                    for j, w in enumerate(ids):
                        readings[w] = best_spans(starts[j], ends[j], enc["offset_mapping"][w], enc.sequence_ids(w), top=5)
            best: dict[int, tuple[float, int, int]] = {}
            null: dict[int, float] = {}
            for w in sorted(readings):  # in window order, so a tie goes to the earlier window
                row = todo[enc["overflow_to_sample_mapping"][w]]
                n, spans = readings[w]
                null[row] = min(null.get(row, n), n)
                if spans and spans[0][0] > best.get(row, (float("-inf"), 0, 0))[0]:
                    best[row] = spans[0]
            with self._lock:
                for i in todo:
                    score, start, end = best.get(i, (float("-inf"), 0, 0))
                    span = Span(passages[i][start:end], start, end, round(score - null[i], 4)) if i in best else NO_SPAN
                    out[i] = span
                    self._memo[(question, passages[i])] = span
                while len(self._memo) > MEMO_SIZE:
                    self._memo.popitem(last=False)
        return [out[i] for i in range(len(passages))]


def fingerprint(folder: str | Path | None = None) -> str:
    """A short hash of a span reader's adapter, head and card (default: the one that ships)."""
    return _fingerprint(str(Path(folder or SPANS_DIR).resolve()))


@functools.lru_cache(maxsize=4)
def _fingerprint(folder: str) -> str:
    digest = hashlib.sha256()
    for name in ("adapter_model.safetensors", CARD_FILE):
        digest.update((Path(folder) / name).read_bytes())
    return digest.hexdigest()[:12]


@functools.lru_cache(maxsize=2)
def _load(folder: str) -> SpanReader:
    import torch

    from crag_lab.learned.fit_spans import load_base
    from crag_lab.learned.scorer import merged

    path = Path(folder)
    card_file = path / CARD_FILE
    if not card_file.is_file():
        raise FileNotFoundError(f"{card_file}: no trained span reader here; train one with "
                                "crag_lab/learned/fit_spans.py (see crag_lab/_data/spans/DATA_CARD.md)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    torch.manual_seed(0)
    model, tokenizer = load_base(model_dir())
    return SpanReader(merged(model, path), tokenizer, json.loads(card_file.read_text(encoding="utf-8")))
