"""Index build throughput against the raw encoder, cold and warm reload, incremental rebuild, size.

``KnowledgeBase.build`` of a copy of ``data/kb`` into a fresh cache folder, alternated (build, raw,
raw, build) with ``SentenceTransformer.encode`` of exactly the texts the build embeds (same model
folder, CPU, batch size 64). The build's ``embed_texts`` (``crag_lab.kb._embedding``) is wrapped to check that it embeds those
very texts and to time the model inside the build; the build's vectors must equal the raw ones.
The embedding model is loaded before any timing (its load time is reported apart).

    .venv/bin/python bench/bench_index.py [--quick] [--json out.json]
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import KB, PYTHON, SCRATCH, emit, log, parse_args, ratio, run_child, summary

BATCH = 64

COLD_LOAD = """
import json, sys, time
t0 = time.perf_counter()
from crag_lab.kb import KnowledgeBase
t1 = time.perf_counter()
kb = KnowledgeBase.load(sys.argv[1], cache_dir=sys.argv[2])
t2 = time.perf_counter()
kb.vector_retriever(5).retrieve("On which port does the api-gateway accept public TLS traffic?")
t3 = time.perf_counter()
kb.vector_retriever(5).retrieve("How many requests per minute is one API key allowed to make?")
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_query_s": t3 - t2, "second_query_ms": (t4 - t3) * 1000,
                  "chunks": len(kb.chunks)}))
"""


def copy_kb(dest: Path) -> Path:
    shutil.copytree(KB, dest, ignore=shutil.ignore_patterns(".crag_index", ".*"))
    return dest


def folder_size(path: Path) -> dict[str, Any]:
    """Bytes on disk of an index cache folder, per file name (the FAISS file is default__vector_store.json)."""
    files: dict[str, int] = {}
    for p in sorted(path.rglob("*")):
        if p.is_file():
            files[p.name] = files.get(p.name, 0) + p.stat().st_size
    return {"total_kib": round(sum(files.values()) / 1024, 1),
            "by_file_kib": {k: round(v / 1024, 1) for k, v in sorted(files.items(), key=lambda kv: -kv[1])}}


def padded_tokens(tokenizer: Any, texts: Sequence[str], batch: int, max_len: int) -> dict[str, int]:
    """Tokens the model processes, padding included, for three ways of cutting ``texts`` into batches.

    ``file_order``: as given (LlamaIndex's ``get_text_embedding_batch``); ``most_chars_first``: what
    ``SentenceTransformer.encode`` does; ``most_tokens_first``: what ``KnowledgeBase.build`` does.
    """
    lengths = [min(len(ids), max_len) for ids in tokenizer(list(texts), truncation=False, verbose=False)["input_ids"]]

    def padded(order: Sequence[int]) -> int:
        return sum(max(lengths[i] for i in order[s:s + batch]) * len(order[s:s + batch])
                   for s in range(0, len(order), batch))

    return {"real": sum(lengths), "file_order": padded(range(len(texts))),
            "most_chars_first": padded(sorted(range(len(texts)), key=lambda i: -len(texts[i]))),
            "most_tokens_first": padded(sorted(range(len(texts)), key=lambda i: -lengths[i]))}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv)
    import numpy as np
    from llama_index.core.schema import MetadataMode
    from sentence_transformers import SentenceTransformer

    from crag_lab.embeddings import default_embed_model, model_dir
    from crag_lab.kb import KnowledgeBase, _embedding

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="index-", dir=SCRATCH))
    try:
        t0 = time.perf_counter()
        embed = default_embed_model()
        embed.get_text_embedding("warm-up")
        li_load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        raw = SentenceTransformer(model_dir(), device="cpu")
        raw.encode(["warm-up"], batch_size=BATCH)
        st_load_s = time.perf_counter() - t0

        # The texts a build embeds: those of data/kb's own index (same files, same chunking).
        source = KnowledgeBase.build(KB)
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED)
                 for n in source.index.docstore.get_nodes([c.id for c in source.chunks])]
        n_chunks = len(texts)
        builds: list[Any] = []
        # What each build hands the model, and how long the model takes inside the build.
        embedded: list[tuple[list[str], float]] = []
        real_embed_texts = _embedding.embed_texts

        def timed_embed_texts(model: Any, batch: list[str]) -> Any:
            t = time.perf_counter()
            out = real_embed_texts(model, batch)
            embedded.append((list(batch), time.perf_counter() - t))
            return out

        _embedding.embed_texts = timed_embed_texts  # type: ignore[assignment]

        def build() -> None:
            n = len(builds)
            root = copy_kb(work / f"kb{n}")
            builds.append(KnowledgeBase.build(root, cache_dir=work / f"cache{n}"))

        raw_vectors: list[Any] = []
        contenders = {
            "build": build,
            "raw_encode": lambda: raw_vectors.append(raw.encode(texts, batch_size=BATCH, normalize_embeddings=True,
                                                                show_progress_bar=False)),
        }
        reps = 1 if args.quick else 2
        order = ["build", "raw_encode", "raw_encode", "build"][: 2 * reps]  # ABBA: symmetric in time
        log(f"index: {n_chunks} chunks; {' / '.join(order)}")
        wall: dict[str, list[float]] = {k: [] for k in contenders}
        cpu: dict[str, list[float]] = {k: [] for k in contenders}
        for name in order:
            w0, c0 = time.perf_counter(), time.process_time()
            contenders[name]()
            wall[name].append(time.perf_counter() - w0)
            cpu[name].append(time.process_time() - c0)
        _embedding.embed_texts = real_embed_texts  # type: ignore[assignment]
        kb0 = builds[0]
        if len(kb0.chunks) != n_chunks:
            raise RuntimeError(f"the build made {len(kb0.chunks)} chunks, data/kb's index has {n_chunks}")
        if [batch for batch, _ in embedded] != [texts] * len(builds):
            raise RuntimeError("a build embedded other texts than the raw baseline encodes")
        faiss_index = kb0.index.vector_store.client
        build_vectors = faiss_index.reconstruct_n(0, faiss_index.ntotal)
        max_diff = float(np.abs(build_vectors - raw_vectors[0]).max())
        if max_diff > 1e-4:
            raise RuntimeError(f"the build's vectors differ from the raw encode's by up to {max_diff}")

        def med(values: list[float]) -> float:
            return statistics.median(values)

        build_s, raw_s = med(wall["build"]), med(wall["raw_encode"])
        inside_s = med([s for _, s in embedded])
        throughput: dict[str, Any] = {
            "chunks": n_chunks,
            "batch_size": BATCH,
            "order": order,
            "build_s": summary(wall["build"], 3),
            "raw_encode_s": summary(wall["raw_encode"], 3),
            "cpu_s": {k: summary(v, 3) for k, v in cpu.items()},
            "build_chunks_per_s": round(n_chunks / build_s, 1),
            "raw_chunks_per_s": round(n_chunks / raw_s, 1),
            "build_vs_raw": ratio(raw_s, build_s),
            "build_vs_raw_cpu": ratio(med(cpu["raw_encode"]), med(cpu["build"])),
            "build_vs_raw_per_pair": [ratio(r, b) for r, b in zip(wall["raw_encode"], wall["build"], strict=True)],
            "build_encode_s": summary([s for _, s in embedded], 3),
            "build_minus_its_encode_s": round(build_s - inside_s, 3),
            "max_abs_vector_diff_vs_raw": max_diff,
            "padded_tokens": padded_tokens(raw.tokenizer, texts, BATCH, raw.max_seq_length),
            "model_load_s": {"llamaindex": round(li_load_s, 2), "sentence_transformers": round(st_load_s, 2)},
        }

        kb_root, cache = kb0.root, kb0.cache_dir
        size = folder_size(cache)

        log("index: warm and cold reloads")
        warm = []
        for _ in range(5):
            t0 = time.perf_counter()
            KnowledgeBase.load(kb_root, cache_dir=cache)
            warm.append(time.perf_counter() - t0)
        cold_runs = []
        for _ in range(1 if args.quick else 2):
            child = run_child([PYTHON, "-c", COLD_LOAD, str(kb_root), str(cache)], timeout_s=300)
            if child.returncode != 0:
                raise RuntimeError(f"cold load failed:\n{child.output[-2000:]}")
            row = json.loads(child.output.strip().splitlines()[-1])
            row.update(process_wall_s=child.wall_s, peak_rss_mib=child.peak_rss_mib)
            cold_runs.append(row)

        def cold_median(key: str) -> float:
            return round(statistics.median(r[key] for r in cold_runs), 3)

        reload = {
            "warm_load_ms": summary([w * 1000 for w in warm], 1),
            "cold": {k: cold_median(k) for k in ("process_wall_s", "import_s", "load_s", "first_query_s", "second_query_ms",
                                         "peak_rss_mib")},
        }

        log("index: incremental rebuilds")
        target = sorted(kb0.files)[len(kb0.files) // 2]
        incremental: list[dict[str, Any]] = []
        unchanged: list[float] = []
        for n in range(1 if args.quick else 3):
            t0 = time.perf_counter()
            KnowledgeBase.build(kb_root, cache_dir=cache)
            unchanged.append(time.perf_counter() - t0)
            with (kb_root / target).open("a", encoding="utf-8") as fh:
                fh.write(f"\n\nAn edit made by the benchmark, number {n}.\n")
            t0 = time.perf_counter()
            kb = KnowledgeBase.build(kb_root, cache_dir=cache)
            incremental.append({"s": time.perf_counter() - t0, "embedded": kb.build_report["chunks_embedded"],
                                "reused": kb.build_report["chunks_reused"]})
        inc_s = statistics.median(r["s"] for r in incremental)
        result = {
            "quick": args.quick,
            "throughput": throughput,
            "targets": {"build_vs_raw_ge_0.9": (throughput["build_vs_raw"] or 0) >= 0.9},
            "size_on_disk": size,
            "reload": reload,
            "incremental": {"file": target, "rebuild_s": summary([r["s"] for r in incremental], 3),
                            "chunks_embedded": incremental[-1]["embedded"], "chunks_reused": incremental[-1]["reused"],
                            "vs_full_build": ratio(inc_s, build_s),
                            "unchanged_rebuild_s": summary(unchanged, 3)},
            "wall_s": round(time.perf_counter() - started, 1),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
