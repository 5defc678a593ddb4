"""The answer scorer: a cross-encoder that reads (question, unit) and says how likely the unit answers.

It is the bundled all-MiniLM-L6-v2 (`crag_lab.embeddings.model_dir`, no hub access) with a LoRA
adapter and a classification head (`peft`), trained by ``python -m crag_lab.learned.train`` on public
training data (the data card, ``crag_lab/_data/scorer/DATA_CARD.md``, names it). Only the adapter and
the head ship; loading merges them into the base weights once, on CPU, in eval mode, so the same pairs
always give the same scores.

>>> scorer = AnswerScorer.load()  # doctest: +SKIP
>>> scorer.predict([("Which port?", "Ports: The gateway listens on 8443.")])  # doctest: +SKIP
array([0.97], dtype=float32)
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

import numpy as np

from crag_lab.embeddings import model_dir

SCORER_DIR = Path(__file__).resolve().parent.parent / "_data" / "scorer"
"""Where the trained adapter, head and data card ship."""
MEMO_SIZE = 50_000
"""How many scored pairs `AnswerScorer.predict` remembers (least recently used go first)."""


@dataclass(frozen=True)
class ScorerCard:
    """What ``scorer.json`` records: the input length, the abstention threshold and how it was trained."""

    max_length: int
    abstain_below: float
    trained: dict[str, Any]


class AnswerScorer:
    """One verb: ``predict(pairs) -> probabilities``. Build it with `load` (cached per folder)."""

    def __init__(self, model: Any, tokenizer: Any, card: ScorerCard) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self.card = card
        self._memo: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def from_adapter(folder: str | Path, card: ScorerCard) -> AnswerScorer:
        """The bundled MiniLM with the adapter and head in ``folder`` merged in, on CPU, in eval mode."""
        import torch

        torch.manual_seed(0)
        model, tokenizer = base_model()
        return AnswerScorer(merged(model, folder), tokenizer, card)

    @staticmethod
    def load(folder: str | Path | None = None) -> AnswerScorer:
        """The scorer in ``folder`` (default: the one that ships), loaded once per process."""
        return _load(str(Path(folder or SCORER_DIR).resolve()))

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 64) -> np.ndarray:
        """The probability that each ``(question, text)`` pair's text answers its question, in order.

        Pairs are batched by token length (`crag_lab.learned.batching.length_batches`) and each batch is
        padded to its own longest pair, so a pair's score never depends on the others it is batched
        with beyond float noise in the last digits;
        scores are rounded to 6 places. The last `MEMO_SIZE` pairs scored are remembered: a grading
        round that sees an item again (a kept item in a later round) reads its units' scores back.
        """
        import torch

        from crag_lab.learned.batching import length_batches

        out = np.zeros(len(pairs), dtype=np.float32)
        todo: dict[tuple[str, str], list[int]] = {}
        with self._lock:  # ask_many grades from several threads
            for i, pair in enumerate(pairs):
                known = self._memo.get(pair)
                if known is None:
                    todo.setdefault(pair, []).append(i)
                else:
                    self._memo.move_to_end(pair)
                    out[i] = known
        fresh = list(todo)
        if fresh:
            enc = self._tokenizer([q for q, _ in fresh], [t for _, t in fresh], truncation="only_second",
                                  max_length=self.card.max_length)
            keys = list(enc.keys())
            with torch.inference_mode():  # pairs of like length together: less padding (`length_batches`)
                for ids in length_batches([len(x) for x in enc["input_ids"]], batch_size):
                    batch = self._tokenizer.pad({k: [enc[k][i] for i in ids] for k in keys}, return_tensors="pt")
                    probs = np.round(torch.sigmoid(self._model(**batch).logits.reshape(-1)).numpy(), 6)
                    with self._lock:
                        for i, p in zip(ids, probs, strict=True):
                            out[todo[fresh[i]]] = p
                            self._memo[fresh[i]] = float(p)
                        while len(self._memo) > MEMO_SIZE:
                            self._memo.popitem(last=False)
        return out


def fingerprint(folder: str | Path | None = None) -> str:
    """A short hash of a scorer's adapter, head and card (default: the one that ships), read without
    loading a model: grades and answers read with another scorer are told apart by it
    (`crag_lab.offline.grader.calibration_fingerprint`, `OfflineModel.cache_identity`)."""
    return _fingerprint(str(Path(folder or SCORER_DIR).resolve()))


@functools.lru_cache(maxsize=4)
def _fingerprint(folder: str) -> str:
    digest = hashlib.sha256()
    for name in ("adapter_model.safetensors", "scorer.json"):
        digest.update((Path(folder) / name).read_bytes())
    return digest.hexdigest()[:12]


def base_model(num_labels: int = 1) -> tuple[Any, Any]:
    """The bundled MiniLM as a sequence classifier with a fresh head, and its tokenizer (offline)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from crag_lab.learned.fit import load_base

    return load_base(model_dir(), num_labels=num_labels)


def merged(model: Any, folder: str | Path) -> Any:
    """``model`` with the LoRA adapter in ``folder`` merged in (`crag_lab.learned.fit.adapter`), in eval mode."""
    from crag_lab.learned.fit import adapter

    model = adapter(model, folder).merge_and_unload()
    model.eval()
    return model


@functools.lru_cache(maxsize=2)
def _load(folder: str) -> AnswerScorer:
    path = Path(folder)
    card_file = path / "scorer.json"
    if not card_file.is_file():
        raise FileNotFoundError(f"{card_file}: no trained scorer here; train one with "
                                "python -m crag_lab.learned.train --train-dir DIR")
    raw = json.loads(card_file.read_text(encoding="utf-8"))
    card = ScorerCard(int(raw["max_length"]), float(raw["abstain_below"]), dict(raw.get("trained", {})))
    return AnswerScorer.from_adapter(path, card)
