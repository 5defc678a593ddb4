"""Scale: build and query the vector index at 1×, 10× and 100× the knowledge base; flat vs ANN.

Re-embedding 37k chunks would take longer than the whole benchmark, so larger knowledge bases are
synthetic: copy c of chunk i gets id ``<id>~c``, the chunk's text and metadata, and the chunk's
unit vector plus Gaussian noise (σ = 0.025 per dimension, so a copy keeps a cosine of about 0.9 with
its original), re-normalised. Each scale is built in its own process (peak RSS is its own) through
the same LlamaIndex path as ``KnowledgeBase`` (``VectorStoreIndex`` over ``FaissVectorStore`` with
``IndexFlatIP``, persisted, reloaded) and queried with the 140 real questions' embeddings (query
embedding time excluded: it does not depend on the index size). At 100× the raw FAISS flat index
is compared with ``IndexHNSWFlat`` and ``IndexIVFFlat``: recall@5 against the exact top 5, and
single-query latency on one thread.

    .venv/bin/python bench/bench_scale.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import KB, PYTHON, SCRATCH, SHARED_DATASETS, emit, load_rows, log, parse_args, run_child, summary

NOISE = 0.025
SEED = 7
TOP_K = 5
BASE = SCRATCH / "scale"


def prepare() -> dict[str, Any]:
    """The real chunk vectors, their nodes and the questions' embeddings, saved for the children."""
    from crag_lab.kb import KnowledgeBase

    kb = KnowledgeBase.build(KB)  # reloads the index when nothing changed
    faiss_index = kb.index.vector_store.client  # type: ignore[attr-defined]
    vectors = np.asarray(faiss_index.reconstruct_n(0, faiss_index.ntotal), dtype=np.float32)
    ids = [kb.index.index_struct.nodes_dict[str(i)] for i in range(faiss_index.ntotal)]
    nodes = kb.index.docstore.get_nodes(ids)
    questions = [r["question"] for r in load_rows()]
    queries = np.asarray([kb.embed_model.get_query_embedding(q) for q in questions], dtype=np.float32)
    BASE.mkdir(parents=True, exist_ok=True)
    np.savez(BASE / "base.npz", vectors=vectors, queries=queries)
    (BASE / "nodes.json").write_text(json.dumps([{"id": n.node_id, "text": n.get_content(), "metadata": n.metadata}
                                                 for n in nodes]), encoding="utf-8")
    return {"chunks": len(ids), "dim": int(vectors.shape[1]), "queries": len(questions)}


def synthetic(vectors: np.ndarray, scale: int) -> np.ndarray:
    """``scale`` copies of every vector: the originals, then noisy re-normalised copies."""
    rng = np.random.default_rng(SEED)
    copies = [vectors]
    for _ in range(scale - 1):
        noisy = vectors + rng.normal(0.0, NOISE, vectors.shape).astype(np.float32)
        copies.append(noisy / np.linalg.norm(noisy, axis=1, keepdims=True))
    return np.ascontiguousarray(np.concatenate(copies), dtype=np.float32)


def mixtures(vectors: np.ndarray, scale: int) -> np.ndarray:
    """``scale`` times as many vectors: the originals, then w·x_i + (1−w)·x_j + noise for random j, w.

    Unlike the near-duplicate copies, these spread over the space the real chunks span, so nearest
    neighbours are not ties between copies of one chunk (a fairer test of ANN recall).
    """
    rng = np.random.default_rng(SEED + 1)
    n = len(vectors)
    parts = [vectors]
    for _ in range(scale - 1):
        w = rng.uniform(0.2, 0.8, (n, 1)).astype(np.float32)
        other = vectors[rng.integers(0, n, n)]
        mixed = w * vectors + (1 - w) * other + rng.normal(0.0, NOISE, vectors.shape).astype(np.float32)
        parts.append(mixed / np.linalg.norm(mixed, axis=1, keepdims=True))
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def rss_mib() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss / 2**20)


def child(scale: int) -> dict[str, Any]:
    """Build, persist, reload and query the LlamaIndex + FAISS index at one scale (run in a fresh process)."""
    import faiss
    from llama_index.core import MockEmbedding, StorageContext, VectorStoreIndex, load_index_from_storage
    from llama_index.core.schema import QueryBundle, TextNode
    from llama_index.vector_stores.faiss import FaissVectorStore

    rss0 = rss_mib()
    data = np.load(BASE / "base.npz")
    base_nodes = json.loads((BASE / "nodes.json").read_text(encoding="utf-8"))
    vectors = synthetic(data["vectors"], scale)
    queries = data["queries"]
    dim = vectors.shape[1]
    n_base = len(base_nodes)
    rss1 = rss_mib()
    t0 = time.perf_counter()
    nodes = []
    for j, vec in enumerate(vectors):
        src = base_nodes[j % n_base]
        nodes.append(TextNode(id_=f"{src['id']}~{j // n_base}", text=src["text"], metadata=src["metadata"],
                              embedding=vec.tolist(), excluded_embed_metadata_keys=["line_start", "line_end"],
                              excluded_llm_metadata_keys=["line_start", "line_end"]))
    t1 = time.perf_counter()
    store = FaissVectorStore(faiss_index=faiss.IndexFlatIP(dim))
    context = StorageContext.from_defaults(vector_store=store)
    embed = MockEmbedding(embed_dim=dim)
    index = VectorStoreIndex(nodes, storage_context=context, embed_model=embed)
    t2 = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix=f"scale{scale}-", dir=SCRATCH))
    try:
        context.persist(persist_dir=str(folder))
        t3 = time.perf_counter()
        disk = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        faiss_bytes = (folder / "default__vector_store.json").stat().st_size
        rss_built = rss_mib()
        del index, context, store, nodes
        t4 = time.perf_counter()
        store = FaissVectorStore.from_persist_dir(str(folder))
        context = StorageContext.from_defaults(persist_dir=str(folder), vector_store=store)
        loaded = load_index_from_storage(context, embed_model=embed)
        t5 = time.perf_counter()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    retriever = loaded.as_retriever(similarity_top_k=TOP_K)
    retriever.retrieve(QueryBundle("warm", embedding=queries[0].tolist()))
    engine_ms, flat_ms, flat1_ms = [], [], []
    raw = store.client
    for q in queries:
        s = time.perf_counter()
        retriever.retrieve(QueryBundle("q", embedding=q.tolist()))
        engine_ms.append((time.perf_counter() - s) * 1000)
        s = time.perf_counter()
        raw.search(q.reshape(1, -1), TOP_K)
        flat_ms.append((time.perf_counter() - s) * 1000)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    for q in queries:
        s = time.perf_counter()
        raw.search(q.reshape(1, -1), TOP_K)
        flat1_ms.append((time.perf_counter() - s) * 1000)
    faiss.omp_set_num_threads(threads)
    return {
        "scale": scale, "chunks": len(vectors),
        "build_s": {"nodes": round(t1 - t0, 3), "index": round(t2 - t1, 3), "persist": round(t3 - t2, 3),
                    "total": round(t3 - t0, 3)},
        "reload_s": round(t5 - t4, 3),
        "disk_mib": round(disk / 2**20, 2), "faiss_file_mib": round(faiss_bytes / 2**20, 2),
        "rss_mib": {"start": round(rss0, 1), "vectors_loaded": round(rss1, 1), "built": round(rss_built, 1),
                    "after_reload": round(rss_mib(), 1)},
        "query_ms": {"llamaindex_retriever": summary(engine_ms, 3), "faiss_flat": summary(flat_ms, 3),
                     "faiss_flat_1_thread": summary(flat1_ms, 3)},
    }


def ann(xb: np.ndarray, xq: np.ndarray, quick: bool) -> dict[str, Any]:
    """Recall@5 and one-thread latency of HNSW and IVF against exact flat search over ``xb``."""
    import faiss

    xb = np.ascontiguousarray(xb, dtype=np.float32)
    xq = np.ascontiguousarray(xq, dtype=np.float32)
    n, dim = xb.shape
    faiss.omp_set_num_threads(1)

    def latency(index: Any) -> dict[str, Any]:
        times = []
        for q in xq:
            s = time.perf_counter()
            index.search(q.reshape(1, -1), TOP_K)
            times.append((time.perf_counter() - s) * 1000)
        return summary(times, 4)

    flat = faiss.IndexFlatIP(dim)
    flat.add(xb)
    _, truth = flat.search(xq, TOP_K)

    def recall(index: Any) -> float:
        _, got = index.search(xq, TOP_K)
        return round(float(np.mean([len(set(g) & set(t)) / TOP_K for g, t in zip(got, truth, strict=True)])), 4)

    out: dict[str, Any] = {"chunks": n, "flat": {"latency_ms": latency(flat), "recall_at_5": 1.0,
                                                 "bytes_per_vector": dim * 4}}
    t0 = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 40
    hnsw.add(xb)
    out["hnsw"] = {"M": 32, "efConstruction": 40, "build_s": round(time.perf_counter() - t0, 2), "efSearch": {}}
    for ef in (16, 64, 256) if quick else (16, 32, 64, 128, 256):
        hnsw.hnsw.efSearch = ef
        out["hnsw"]["efSearch"][ef] = {"recall_at_5": recall(hnsw), "latency_ms": latency(hnsw)}
    nlist = max(1, min(int(4 * np.sqrt(n)), n // 39))  # FAISS wants >= 39 training points per list
    t0 = time.perf_counter()
    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.train(xb)
    ivf.add(xb)
    out["ivf"] = {"nlist": nlist, "build_s": round(time.perf_counter() - t0, 2), "nprobe": {}}
    for nprobe in (1, 8, 32) if quick else (1, 4, 8, 16, 32, 64):
        ivf.nprobe = nprobe
        out["ivf"]["nprobe"][nprobe] = {"recall_at_5": recall(ivf), "latency_ms": latency(ivf)}
    return out


def real_vectors_ann(quick: bool) -> dict[str, Any]:
    """The same ANN comparison on real vectors: HotpotQA passages and questions (skipped if absent).

    The synthetic copies above are near-duplicates, a hard case for ANN; real text checks that the
    recall numbers are not an artefact of them. Embeddings are cached in .cache/bench/scale/.
    """
    folder = SHARED_DATASETS / "hotpotqa_distractor_dev250"
    if not (folder / "corpus.jsonl").is_file():
        message = f"skipped: {folder} is absent (the shared datasets are optional)"
        log(f"scale: {message}")
        return {"skipped": message}
    cache = BASE / "hotpotqa.npz"
    stamp = f"{(folder / 'corpus.jsonl').stat().st_size}-{(folder / 'queries.jsonl').stat().st_size}"
    if cache.is_file() and str(np.load(cache)["stamp"]) == stamp:
        data = np.load(cache)
        xb, xq, embed_s = data["passages"], data["queries"], float(data["embed_s"])
    else:
        from crag_lab.embeddings import default_embed_model
        from crag_lab.kb._embedding import embed_texts

        passages = [json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
                    if line.strip()]
        questions = [json.loads(line)["question"] for line in
                     (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
        model = default_embed_model()
        log(f"scale: embedding {len(passages)} HotpotQA passages (cached afterwards)")
        t0 = time.perf_counter()
        xb = embed_texts(model, [f"{p['title']}\n{p['text']}" for p in passages])  # batched by length, as a build
        embed_s = time.perf_counter() - t0
        xq = np.asarray([model.get_query_embedding(q) for q in questions], dtype=np.float32)
        np.savez(cache, passages=xb, queries=xq, embed_s=embed_s, stamp=stamp)
    out = ann(xb, xq, quick)
    out["embedding_s"] = round(embed_s, 1)
    out["source"] = str(folder.name)
    return out


def extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv, extra)
    if args.child:
        result = child(args.child)
        emit(result, args.json_out)
        return result
    started = time.perf_counter()
    log("scale: real vectors and question embeddings")
    base = prepare()
    scales = (1, 10, 100)
    per_scale = []
    for scale in scales:
        log(f"scale: {scale}× in a fresh process")
        out = BASE / f"child{scale}.json"
        proc = run_child([PYTHON, __file__, "--child", str(scale), "--json", str(out)], timeout_s=900)
        if proc.returncode != 0:
            raise RuntimeError(f"scale {scale}× failed:\n{proc.output[-3000:]}")
        row = json.loads(out.read_text(encoding="utf-8"))
        row["peak_rss_mib"] = round(proc.peak_rss_mib, 1)
        row["process_wall_s"] = round(proc.wall_s, 2)
        per_scale.append(row)
    log("scale: flat vs HNSW vs IVF at 100×")
    data = np.load(BASE / "base.npz")
    ann_100 = ann(synthetic(data["vectors"], 100), data["queries"], args.quick)
    ann_mix = ann(mixtures(data["vectors"], 100), data["queries"], args.quick)
    real = real_vectors_ann(args.quick)
    first, last = per_scale[0], per_scale[-1]
    growth = {
        "chunks": last["chunks"] / first["chunks"],
        "build_s": round(last["build_s"]["total"] / first["build_s"]["total"], 1),
        "reload_s": round(last["reload_s"] / max(first["reload_s"], 1e-9), 1),
        "retriever_ms": round(last["query_ms"]["llamaindex_retriever"]["median"]
                              / first["query_ms"]["llamaindex_retriever"]["median"], 1),
        "flat_1_thread_ms": round(last["query_ms"]["faiss_flat_1_thread"]["median"]
                                  / first["query_ms"]["faiss_flat_1_thread"]["median"], 1),
        "peak_rss_mib": round(last["peak_rss_mib"] / first["peak_rss_mib"], 2),
        "disk_mib": round(last["disk_mib"] / first["disk_mib"], 1),
    }
    result = {"quick": args.quick, "base": base, "noise_sigma": NOISE, "per_scale": per_scale,
              "growth_1x_to_100x": growth, "ann_at_100x": ann_100,
              "ann_at_100x_mixtures": ann_mix, "ann_real_hotpotqa": real,
              "wall_s": round(time.perf_counter() - started, 1)}
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
