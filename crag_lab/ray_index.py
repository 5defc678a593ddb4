"""Embed a knowledge base's chunks on Ray Data workers: the build's one expensive step, spread over a cluster.

``KnowledgeBase.build(root, embed_with="ray")`` (or a Ray address, or a `RayDataEmbedder`) chunks,
hashes and writes the index exactly as a local build does: the same manifest, the same folder
layout and atomic ``CURRENT`` swap, the same incremental rebuild (only changed files are
embedded). Only the embedding moves: a Ray Data ``map_batches`` stage whose workers (actors, one
CPU or GPU each) load the embedding model once and embed the chunks.

The vectors are byte-equal to a local build's. A transformer's output depends, in its last float
digits, on which texts share a batch (they are padded to the batch's longest), so the driver cuts
the batches a local build would (`crag_lab.kb._embedding.embedding_batches`: longest first, 64 a
batch), each Ray Data row carries one whole batch, every worker embeds its rows with the local
path's `embed_batch`, and the driver puts the rows back in order. The driver loads the model's
tokenizer to sort the texts; it embeds nothing.

>>> resolve_embedder("ray://head:10001").address
'ray://head:10001'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from crag_lab._ray import ADDRESS_FORMS, import_ray, init_ray, is_ray_address, threads_if_this_machine
from crag_lab._text import encodable
from crag_lab.kb._embedding import (
    Embedder,
    UnitEmbedding,
    embed_batch,
    embed_texts,
    embedding_batches,
    in_text_order,
    unit_embedding,
)

__all__ = ["EMBED_WITH", "Embedder", "RayDataEmbedder", "resolve_embedder"]

EMBED_WITH = ("local", "ray")
_PURPOSE = "embed_with='ray'"


def resolve_embedder(spec: str | Embedder) -> Embedder:
    """What embeds a build's chunks, from what a user wrote: ``"local"``, ``"ray"``, a Ray address or an embedder.

    ``"local"`` embeds in this process (`crag_lab.kb._embedding.embed_texts`); ``"ray"`` joins the
    cluster in ``RAY_ADDRESS`` or starts a local Ray; an address joins that cluster. An embedder is
    any callable ``(model, texts) -> float32 rows``, such as a configured `RayDataEmbedder`.

    >>> resolve_embedder("local").__name__
    'embed_texts'
    >>> resolve_embedder("threads")
    Traceback (most recent call last):
    ...
    ValueError: unknown embed_with 'threads'; use 'local', 'ray', a Ray address (...) or a RayDataEmbedder
    """
    if not isinstance(spec, str):
        if not callable(spec):
            raise TypeError(f"embed_with takes a name or a callable (model, texts) -> vectors; got {type(spec).__name__}")
        return spec
    if spec == "local":
        return embed_texts
    if spec == "ray":
        return RayDataEmbedder()
    if is_ray_address(spec):
        return RayDataEmbedder(spec)
    raise ValueError(f"unknown embed_with {spec!r}; use 'local', 'ray', a Ray address ({ADDRESS_FORMS}) or a "
                     "RayDataEmbedder")


class EmbedBatches:
    """A Ray Data worker: loads the embedding model once, then embeds whole local batches, one per row.

    Rows are ``{"batch": i, "texts": [...]}``; each comes back as ``{"batch": i, "vectors": bytes,
    "embed_s": seconds}``: the float32 rows of `embed_batch` as they are (nothing is rounded on the way
    back), and the time the model took.
    """

    def __init__(self, factory: Callable[[], BaseEmbedding], model_name: str, batch_size: int,
                 device: str | None = None, threads: int | None = None) -> None:
        if threads is not None:  # the driver's torch threads: same machine, same thread count, same bytes
            import torch

            torch.set_num_threads(threads)
        self.model = UnitEmbedding(factory, model_name=model_name, embed_batch_size=batch_size)
        encoder = getattr(self.model.inner, "_model", None)  # a Sentence Transformers model (the bundled one)
        if device is not None and encoder is not None and callable(getattr(encoder, "to", None)):
            encoder.to(device)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        blobs, seconds = [], []
        for texts in batch.column("texts").to_pylist():
            started = time.perf_counter()
            blobs.append(embed_batch(self.model, [str(t) for t in texts]).tobytes())
            seconds.append(time.perf_counter() - started)
        return pa.table({"batch": batch.column("batch").cast(pa.int64()), "vectors": pa.array(blobs, pa.large_binary()),
                         "embed_s": pa.array(seconds, pa.float64())})


class RayDataEmbedder:
    """Embeds a build's chunks in a Ray Data ``map_batches`` stage over a pool of model-holding workers.

    Parameters
    ----------
    address
        A Ray cluster to join (``"auto"``, ``"ray://head:10001"``, ``"head:6379"``); None joins the one
        in ``RAY_ADDRESS`` or starts a local Ray (stopped again after the build). If Ray is already
        initialised in this process, that is used as it is.
    workers
        Workers in the pool; default one per CPU of the cluster (per GPU with ``num_gpus``), at most
        one per batch.
    num_gpus
        GPUs per worker (e.g. 1 on a GPU cluster); the worker then moves a Sentence Transformers model
        to ``device`` (default ``"cuda"``). GPU vectors agree with CPU ones to float rounding, not bytes.

    After a build, ``last_run`` says what its stage did: ``batches``, ``workers``, ``texts`` and
    ``worker_embed_s`` (the seconds the workers' models spent embedding, their start excluded).

    >>> kb = KnowledgeBase.build("corpus", embed_with=RayDataEmbedder("auto", num_gpus=1))  # doctest: +SKIP
    """

    def __init__(self, address: str | None = None, *, workers: int | None = None, num_gpus: float = 0.0,
                 device: str | None = None) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if num_gpus < 0:
            raise ValueError(f"num_gpus must be >= 0, got {num_gpus}")
        self.address = address
        self.workers = workers
        self.num_gpus = num_gpus
        self.device = device if device is not None else ("cuda" if num_gpus > 0 else None)
        self.last_run: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"RayDataEmbedder(address={self.address!r}, workers={self.workers!r}, num_gpus={self.num_gpus!r})"

    def __call__(self, model: BaseEmbedding, texts: list[str]) -> np.ndarray:
        """``texts`` as unit float32 rows, in order: the rows `crag_lab.kb._embedding.embed_texts` gives."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        embed = unit_embedding(model)
        import_ray(_PURPOSE)  # a missing Ray fails before the model loads to sort the texts
        order, batches = embedding_batches(embed, texts)
        return in_text_order(order, self.embed_batches(embed, batches))

    def pool_size(self, batches: int) -> int:
        """How many workers embed ``batches`` batches on the cluster this process is joined to."""
        if self.workers is not None:
            return min(self.workers, batches)
        resources = import_ray(_PURPOSE).cluster_resources()
        per_worker, kind = (self.num_gpus, "GPU") if self.num_gpus > 0 else (1.0, "CPU")
        return max(1, min(batches, int(resources.get(kind, 1) // per_worker)))

    def embed_batches(self, embed: UnitEmbedding, batches: Sequence[list[str]]) -> list[np.ndarray]:
        """Each batch's float32 rows, in the order given, embedded by the Ray Data workers.

        Joins or starts Ray first (`crag_lab._ray.init_ray`), and stops a Ray it started once done.
        """
        started = init_ray(_PURPOSE, self.address, num_cpus=self.workers)
        try:
            return self._run_stage(embed, batches)
        finally:
            if started:
                import_ray(_PURPOSE).shutdown()

    def _run_stage(self, embed: UnitEmbedding, batches: Sequence[list[str]]) -> list[np.ndarray]:
        try:
            import ray.data as ray_data
        except ImportError as exc:  # Ray without its data extra (pyarrow)
            raise ImportError(f"{_PURPOSE} needs Ray Data: pip install 'ray[data]' (in crag-lab[scale])") from exc
        size = self.pool_size(len(batches))
        # encodable: Arrow takes no lone surrogate; the worker's model would replace it the same way
        rows = ray_data.from_items([{"batch": i, "texts": [encodable(t) for t in batch]} for i, batch in enumerate(batches)],
                                   override_num_blocks=min(len(batches), 4 * size))
        embedded = rows.map_batches(
            EmbedBatches,
            fn_constructor_kwargs={"factory": embed.factory, "model_name": embed.model_name,
                                   "batch_size": embed.embed_batch_size, "device": self.device,
                                   "threads": None if self.num_gpus else threads_if_this_machine(size)},
            batch_size=1,  # one Ray Data row = one whole local batch, never split or merged
            batch_format="pyarrow",
            compute=ray_data.ActorPoolStrategy(size=size),
            num_cpus=1,
            num_gpus=self.num_gpus or None,
        )
        found: dict[int, np.ndarray] = {}
        embed_s = 0.0
        for row in embedded.iter_rows():
            i = int(row["batch"])
            found[i] = np.frombuffer(row["vectors"], dtype=np.float32).reshape(len(batches[i]), -1)
            embed_s += float(row["embed_s"])
        missing = [i for i in range(len(batches)) if i not in found]
        if missing:
            raise RuntimeError(f"Ray Data returned no vectors for {len(missing)} of {len(batches)} batches")
        self.last_run = {"batches": len(batches), "workers": size, "texts": sum(len(b) for b in batches),
                         "worker_embed_s": round(embed_s, 3)}
        return [found[i] for i in range(len(batches))]
