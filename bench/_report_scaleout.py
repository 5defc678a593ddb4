"""RESULTS.md sections 9 and 10: scale-out on Ray and Qdrant, and a real model server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _report_fmt import f, pct, status, table


def section_scaleout(so: Mapping[str, Any]) -> str:
    t, r, vs = so["throughput"], so["ratios"], so["vector_stores"]
    names = {"local": "local (this process)", "ray_1": "Ray, 1 worker", "ray_2": "Ray, 2 workers"}
    out = ["## 9. Scale-out: Ray and Qdrant\n",
           f"`bench/bench_scaleout.py`: {t['local']['questions']} stratified questions of `data/kb_queries.jsonl`, "
           f"offline model, on `{so['kb']}`, each contender cold"
           + (f" on a prepared index (`Lab.prepare` first: {f(so['prepared']['texts_encoded'])} texts encoded in "
              f"{f(so['prepared']['seconds'], 1)} s)" if "prepared" in so else "")
           + f"; {so['cpus']} CPUs shared by everything on the "
           f"machine (load average {so['load_average_before'][0]} → {so['load_average_after'][0]}). `ray.init` "
           f"(local, 2 CPUs, no dashboard): **{f(so['ray_init_s'], 1)} s**. Records equal to the local run: "
           f"{', '.join(f'{k} {f(v)}' for k, v in so['records_equal'].items())}"
           + (f"; answers, routes and citations equal: {', '.join(f'{k} {f(v)}' for k, v in so['answers_equal'].items())}"
              if "answers_equal" in so else "")
           + ". A worker runs the driver's torch threads where that many workers on that many threads fit the "
           "machine's cores, else one (`crag_lab._ray.threads_if_this_machine`); on some CPUs a thread count moves "
           "MiniLM's last float digits, so a router probability's.\n"]
    out.append(table(["contender", "torch threads", "start-up s", "answering s", "questions/s",
                      "questions/s with start-up", "questions per worker"],
                     [[names[k], f(v["threads"]), f(v["startup_s"], 1), f(v["answer_s"], 1),
                       f(v["questions_per_s"], 3), f(v["questions_per_s_with_startup"], 3),
                       ", ".join(str(n) for n in v.get("per_worker", [])) or "—"] for k, v in t.items()]))
    out.append(f"\nRatios (questions/s): 2 workers / 1 worker **{f(r['ray_2_over_ray_1'], 2)}×**; "
               f"1 worker / local {f(r['ray_1_over_local'], 2)}×; 2 workers / local {f(r['ray_2_over_local'], 2)}×.\n")
    if "index_build" in so:
        out.append(section_scaleout_build(so["index_build"]))
    if "model_server" in so:
        out.append(section_scaleout_server(so["model_server"]))
    lat = vs["latency_ms"]
    out.append(f"FAISS (flat, in memory) against Qdrant ({vs['qdrant_mode']}) on the {vs['chunks']} chunks of the "
               f"bundled KB: the FAISS index moved into Qdrant in {f(vs['move_into_qdrant_s'], 2)} s without "
               f"re-embedding; top 10 for each of {vs['questions']} questions × {vs['repeats']} (same query vectors, "
               f"the store's query only). Recall@10 agreement **{f(vs['recall_at_10_agreement'], 4)}** "
               f"(lowest {f(vs['min_overlap'], 1)}); target ≥ 0.99: "
               f"{status(vs['recall_at_10_agreement'] >= 0.99)}.\n")
    out.append(table(["store", "median ms", "p95 ms", "max ms"],
                     [[k, f(v["median"], 3), f(v["p95"], 3), f(v["max"], 3)] for k, v in lat.items()]))
    return "\n".join(out)


def section_scaleout_build(ib: Mapping[str, Any]) -> str:
    """Index builds: local against Ray Data, and whether the Ray Data indexes are the local one byte for byte."""
    def name(k: str, v: Mapping[str, Any]) -> str:
        if k == "local":
            return "local (this process, model already loaded)"
        return f"Ray Data, {v['workers']} worker(s) ({v['batches']} batches of 64)"

    rows = [[name(k, v), f(v["seconds"], 1),
             f(v["chunks_per_s"], 2), f(ib["ratios"].get(f"{k}_over_local"), 2) if k != "local" else "—",
             f(v.get("worker_embed_s"), 1) if k != "local" else "—",
             f(v.get("worker_chunks_per_s"), 2) if k != "local" else "—",
             ", ".join(f"{part} {f(same)}" for part, same in ib["byte_equal"].get(k, {}).items()) or "—"]
            for k, v in ib["builds"].items()]
    return ("\n### Index builds: local against Ray Data\n\n"
            f"The bundled KB's {ib['chunks']} chunks embedded from scratch (MiniLM, CPU) in this process and by a "
            "Ray Data `map_batches` stage (`KnowledgeBase.build(..., embed_with=RayDataEmbedder(workers=n))`, one row "
            "per local batch of 64) on a local Ray (`ray.init` "
            f"{f(ib['ray_init_s'], 1)} s, not counted). A Ray Data build counts its workers' start: each loads "
            "torch and MiniLM before it embeds. Same index as the local build, byte for byte: "
            f"{status(ib['all_equal'], 'vectors, manifest, docstore and FAISS file')}.\n\n"
            + table(["build", "seconds", "chunks/s", "× local", "worker model s (all workers)",
                     "chunks per worker model-second", "equal to the local index"], rows))


def section_scaleout_server(ms: Mapping[str, Any]) -> str:
    """Questions/s against a real OpenAI-compatible server, or why it was not measured."""
    if "skipped" in ms:
        return f"\n### A real model server\n\nNot measured: {ms['skipped']}.\n"
    names = {"local_c1": "here, one question at a time", "local_c2": "here, two at a time (`concurrency=2`)",
             "ray_1": "Ray, 1 worker"}
    rows = [[names.get(k, k), f(v["startup_s"], 1) if v["startup_s"] else "—", f(v["answer_s"], 1),
             f(v["questions_per_s"], 3), f(v["calls_per_s"], 2), f(v["tokens_per_s"], 0), f(v["calls_per_question"], 2),
             f(v["failed_calls"])] for k, v in ms["runs"].items()]
    ratios = "; ".join(f"{k.replace('_over_local_c1', '')} / one at a time **{f(v, 2)}×**" for k, v in ms["ratios"].items())
    return ("\n### A real model server\n\n"
            f"{ms['questions']} stratified KB questions against {ms['server']} serving {ms['model']} (the realmodel "
            f"extra; started in {f(ms['server_start_s'], 1)} s), `CragConfig(top_k=3, max_iterations=1)`, no response "
            "cache. The server and the lab share the machine's 2 cores. Several questions at once against one server: "
            "section 10.\n\n"
            + table(["contender", "start-up s", "answering s", "questions/s", "model calls/s", "tokens/s",
                     "calls per question", "failed calls"], rows)
            + f"\nRatios (questions/s): {ratios}.\n")


def section_realmodel(rm: Mapping[str, Any]) -> str:
    """Issue #15's numbers for a real model: tokens/s, seconds per question, a cached re-run, concurrency."""
    head = "## 10. A real model: tokens/s, a cached re-run, concurrency 1 against 4\n\n"
    if "skipped" in rm:
        return head + f"Not measured: {rm['skipped']}.\n"
    names = {"cold": "one at a time, empty cache", "rerun": "the same again, from the cache",
             "concurrent": f"{rm['runs']['concurrent']['concurrency']} at a time, no cache"}
    rows = [[names[k], f(v["wall_s"], 1), f(v["s_per_question"], 2), f(v["questions_per_s"], 3),
             f(v["calls_per_question"], 2), f(v["model_calls"]), pct(v["cache_hit_rate"]), f(v["failed_calls"]),
             f"{v['prompt_tokens']} / {v['prompt_tokens_reused']}",
             f(v["prompt_tokens_per_s"], 0) if v["prompt_tokens"] else "—",
             f(v["generation_tokens_per_s"], 1) if v["generated_tokens"] else "—"] for k, v in rm["runs"].items()]
    rerun, ratios = rm["runs"]["rerun"], rm["ratios"]
    by_task = rm["runs"]["cold"].get("calls_by_task")
    calls = ("" if not by_task else " Calls of the cold run by node: " + ", ".join(f"{t} {k}" for t, k in by_task.items())
             + (": most plans name tool calls that find nothing (a grep for a made-up pattern, a file that does not "
                "exist), so those questions end without evidence to grade or synthesize from."
                if by_task.get("grade", 0) < by_task.get("plan", 0) else "."))
    return (head + f"`bench/bench_realmodel.py`: {rm['questions']} stratified KB questions against {rm['server']} "
            f"serving {rm['model']} (the realmodel extra; started in {f(rm['server_start_s'], 1)} s), "
            "`CragConfig(top_k=3, max_iterations=1, routing=False)` (no routing shortcut: every question is "
            "classified and planned, and what its plan retrieves is graded and synthesized), at most 200 "
            "generated tokens per call, JSON schemas on analyze, plan and "
            "grade. Tokens/s are the server's own counters over each run (prompt: tokens read; "
            "generation: tokens written; per slot under concurrency); the server reuses the part of a prompt that "
            "matches its slot's last one, and counts those tokens apart (they take no time). The server and the lab share the "
            "machine's 2 cores.\n\n"
            + table(["run", "wall s", "s / question", "questions/s", "calls / question", "model calls", "cache hits",
                     "failed calls", "prompt tokens read / reused", "prompt tokens/s", "generation tokens/s"], rows)
            + f"\nThe re-run from the cache: {rerun['model_calls']} model calls, {pct(rerun['cache_hit_rate'])} hits "
            f"(goal 0 calls, 100 %: {status(rerun['model_calls'] == 0 and rerun['cache_hit_rate'] == 1.0)}); records "
            f"equal to the cold run's, latencies aside: {'yes' if rm['rerun_equal'] else '**no**'}. "
            f"Concurrency {rm['runs']['concurrent']['concurrency']} / 1 in questions/s: "
            f"**{f(ratios['concurrent_over_cold'], 2)}×** (records equal to the one-at-a-time run's: "
            f"{'yes' if rm['concurrent_equal'] else 'no'}); "
            f"the cached re-run is {f(ratios['rerun_over_cold'], 0)}× the cold one.{calls}\n")
