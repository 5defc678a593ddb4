"""Scale-out: local against Ray (1 and 2 workers) on the KB questions; Ray's start-up; FAISS against Qdrant.

Throughput: the same stratified sample of ``data/kb_queries.jsonl`` answered by the offline model
three ways, each starting cold (a fresh lab, fresh worker processes): in this process
(`Lab.run`), then on a local Ray with one worker and with two (`RayExecutor`). Start-up (``ray.init``,
and the actors building their labs until the first answer can be asked) is timed apart from
answering. Every Ray run must give the local run's records (latencies aside); the bench says so.

Vector stores: the bundled KB's FAISS index copied into an embedded Qdrant collection (no
re-embedding), then every question's top 10 from both with the same query vectors: latency of the
store query alone, and recall@10 agreement (|FAISS top 10 ∩ Qdrant top 10| / 10, averaged).

    .venv/bin/python bench/bench_scaleout.py [--quick] [--json out.json]

Result keys: ``throughput`` (per contender: questions, seconds, questions/s, start-up s),
``ratios``, ``ray_init_s``, ``records_equal``, ``vector_stores`` (latency summaries, recall@10).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

from _common import KB, SCRATCH, emit, load_average, load_rows, log, parse_args, ratio, stratified, summary

QUESTIONS = 24


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    from crag_lab.parsing import strip_stats_blocks

    out = {k: v for k, v in record.items() if k not in ("latency_ms", "node_ms")}
    out["answer"] = strip_stats_blocks(str(out["answer"]))
    out["usage"] = [{k: v for k, v in u.items() if k != "latency_ms"} for u in out["usage"]]
    return out


def throughput(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    import ray

    from crag_lab import Lab
    from crag_lab.ray_executor import RayExecutor

    lab = Lab.from_directory(KB, remote=False)
    lab.kb.embed_model.get_query_embedding("warm up")  # the model's load is not the run's  # type: ignore[union-attr]
    log(f"local: {len(rows)} questions")
    started = time.perf_counter()
    local = lab.run(rows)
    results: dict[str, Any] = {"local": {"questions": len(rows), "answer_s": round(time.perf_counter() - started, 2),
                                         "startup_s": 0.0, "threads": _torch_threads()}}
    expected = [comparable(r) for r in local.records]

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
                results[f"ray_{workers}"] = {"questions": len(rows), "answer_s": round(answer_s, 2),
                                             "startup_s": round(startup, 2), "threads": 1,
                                             "per_worker": [len(s["answered"]) for s in pool.status()]}
    finally:
        ray.shutdown()
    for run in results.values():
        run["questions_per_s"] = round(run["questions"] / run["answer_s"], 3)
        run["questions_per_s_with_startup"] = round(run["questions"] / (run["answer_s"] + run["startup_s"]), 3)
    ratios = {"ray_2_over_ray_1": ratio(results["ray_2"]["questions_per_s"], results["ray_1"]["questions_per_s"]),
              "ray_1_over_local": ratio(results["ray_1"]["questions_per_s"], results["local"]["questions_per_s"]),
              "ray_2_over_local": ratio(results["ray_2"]["questions_per_s"], results["local"]["questions_per_s"])}
    return {"throughput": results, "ratios": ratios, "ray_init_s": ray_init_s, "records_equal": equal}


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
    log("vector stores: FAISS against embedded Qdrant")
    result["vector_stores"] = vector_stores([r["question"] for r in load_rows()], 1 if args.quick else 3)
    result["load_average_after"] = load_average()
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
