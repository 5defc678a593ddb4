"""Render bench/RESULTS.md from the results dict that run_all.py writes to bench/results.json."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from _report_batching import headline_batching, section_batching
from _report_export import headline_export, section_export
from _report_fmt import NA, against, f, get, pct, sci, status, table
from _report_scaleout import section_realmodel, section_scaleout

# ---- the headline ------------------------------------------------------------------------------------


def headline(b: Mapping[str, Any], results: Mapping[str, Any] | None = None) -> str:
    rows: list[list[str]] = []
    if results is not None:
        runs = results.get("runs", {})
        partial = any(r.get("from_previous_run") for r in runs.values())
        total = sum(r.get("wall_s") or 0 for r in runs.values()) if partial else results.get("total_wall_s")
        how = ("sum of each benchmark's latest wall time; some come from earlier runs" if partial
               else f"this run, {len(runs)} benchmarks")
        rows.append(["—", "`make bench` under 15 minutes", f"{f(total, 0)} s ({how})",
                     "not measured (quick mode)" if results.get("quick")
                     else against(total, 900, digits=0, unit=" s")])
    calls = b.get("calls")
    if calls:
        r = calls["ratios"]
        c, p = calls["modes"]["knowledge_base"], calls["modes"]["per_item_grading"]
        rows.append(["1", "model calls ≤ 0.5× per_item_grading",
                     f"{f(r['calls_vs_per_item'], 3)}× ({f(c['calls_per_query'])} vs "
                     f"{f(p['calls_per_query'])} per query)",
                     against(r["calls_vs_per_item"], 0.5)])
        rows.append(["1", "grader tokens ≤ 0.6× per_item_grading",
                     f"{f(r['grader_tokens_vs_per_item'], 3)}× ({f(c['grader_tokens_per_query'], 0)} vs "
                     f"{f(p['grader_tokens_per_query'], 0)} per query)",
                     against(r["grader_tokens_vs_per_item"], 0.6)])
        qc, qp = c["quality"], p["quality"]
        ok = calls["targets"]["containment_no_worse"] and calls["targets"]["abstention_no_worse"]
        rows.append(["1", "answer quality no worse than per_item_grading",
                     f"containment {pct(qc['answer_containment'])} vs {pct(qp['answer_containment'])}; "
                     f"false abstention {pct(qc['false_abstention_rate'])} vs {pct(qp['false_abstention_rate'])}; "
                     f"abstention on unanswerable {pct(qc['abstention_rate'])} vs {pct(qp['abstention_rate'])}",
                     status(ok, "" if ok else "abstention on unanswerable questions is lower; see §1")])
        w = calls["worst_case"]
        rows.append(["1", "worst case = 3·max_iterations + 1 calls (batch)",
                     f"forced runs match the formulas: {f(w['all_forced_match'])}; observed max "
                     f"{w['batch_observed_max']} ≤ {w['batch_bound_at_config']}",
                     status(w["all_forced_match"] and w["batch_within_bound"])])
    replay = b.get("replay")
    if replay:
        e, sc = replay["replay_ms"], replay["scalar_ms"]
        rows.append(["2", "replay of 10,000 rounds ≤ 50 ms (`Experiment.replay`)",
                     f"{f(e['cpu_median'], 1)} ms CPU, {f(e['wall_median'], 1)} ms wall",
                     against(e["cpu_median"], 50, digits=1, unit=" ms")])
        rows.append(["2", "vectorised engine equals the scalar reference (`engine=\"scalar\"`)",
                     f"equal on {replay['equal_to_scalar']} configs; scalar {f(sc['cpu_median'], 1)} ms CPU "
                     f"({f(replay['speedup_over_scalar_cpu'], 1)}× slower)",
                     status(replay["equal_all"])])
        rows.append(["2", "replay vs re-running the graph (same questions)",
                     f"{f(replay['rerun']['replay_vs_rerun_speedup'], 0)}× faster", "info"])
    over = b.get("overhead")
    if over:
        e = over["engine"]
        share = e["bookkeeping_share_of_total"]
        rows.append(["3", "graph bookkeeping ≤ 10 % of a query",
                     f"{pct(share, 2)} of total time "
                     f"(median {f(e['all']['bookkeeping_ms']['median'])} ms per query)",
                     against(None if share is None else 100 * share, 10, digits=2, unit=" %")])
        rows.append(["3", "engine vs bare LlamaIndex retriever (median per query)",
                     f"{f(e['engine_vs_bare_retriever'], 1)}× ({f(e['engine_minus_model_vs_bare_retriever'], 1)}× "
                     "without model time)", "info"])
    index = b.get("index")
    if index:
        t = index["throughput"]
        rows.append(["4", "build throughput ≥ 0.9× raw `SentenceTransformer.encode`",
                     f"{f(t['build_vs_raw'], 3)}× wall ({f(t['build_chunks_per_s'], 1)} vs "
                     f"{f(t['raw_chunks_per_s'], 1)} chunks/s, n = {t['build_s']['n']} each); "
                     f"{f(t.get('build_vs_raw_cpu'), 3)}× in CPU time",
                     against(t["build_vs_raw"], 0.9, at_most=False)])
    scale = b.get("scale")
    if scale:
        g = scale["growth_1x_to_100x"]
        rows.append(["5", "scale 1× → 100× (flat index)",
                     f"build ×{g['build_s']}, retriever latency ×{g['retriever_ms']}, peak RSS ×{g['peak_rss_mib']}",
                     "info"])
    mem = b.get("memory")
    if mem:
        exp_key = next((k for k in mem if k.startswith("experiment_")), None)
        rows.append(["6", "peak RSS", f"demo {f(get(mem, 'demo', 'peak_rss_mib'), 0)} MiB; "
                     f"{exp_key.replace('_', ' ') if exp_key else ''} {f(get(mem, exp_key, 'peak_rss_mib'), 0)} MiB",
                     "info"])
    lat = b.get("latency")
    if lat:
        rows.append(["7", "offline p50 per question ≤ 200 ms (issue #12)",
                     f"{f(get(lat, 'now_prepared', 'all', 'p50_ms'), 0)} ms on a prepared index "
                     f"({f(get(lat, 'ratio_p50_now_prepared', 'all'), 2)}× before's "
                     f"{f(get(lat, 'before', 'all', 'p50_ms'), 0)} ms); first session on a new index "
                     f"{f(get(lat, 'now_cold', 'all', 'p50_ms'), 0)} ms",
                     against(get(lat, "now_prepared", "all", "p50_ms"), 200, digits=0, unit=" ms")])
        rows.append(["7", "offline p50 per question on a prepared index ≤ 250 ms (issue #31)",
                     f"{f(get(lat, 'now_prepared', 'all', 'p50_ms'), 0)} ms (simple questions "
                     f"{f(get(lat, 'now_prepared', 'simple', 'p50_ms'), 0)} ms, complex "
                     f"{f(get(lat, 'now_prepared', 'complex', 'p50_ms'), 0)} ms)",
                     against(get(lat, "now_prepared", "all", "p50_ms"), 250, digits=0, unit=" ms")])
    fr = b.get("frontier")
    if fr:
        rows.append(["8", "frontier over ≥ 8,000 settings ≤ 10 s (issue #16)",
                     f"{f(fr['settings'])} settings in {f(get(fr, 'frontier_s', 'wall'), 2)} s "
                     f"({f(fr['speedup'], 0)}× the scalar loop)",
                     against(get(fr, "frontier_s", "wall"), 10, digits=2, unit=" s")])
    if b.get("export"):
        rows.append(headline_export(b["export"]))
    rg = b.get("regrade")
    if rg:
        rows.append(["12", "regrade + replay 140 questions with a cached grader, vs re-running them (issue #33)",
                     f"{f(get(rg, 'cached_s', 'total'), 2)} s vs {f(rg['rerun_s'], 1)} s re-run with the offline model "
                     f"({f(rg['ratio'], 1)}×); reproduces the recording: {f(rg['reproduces_recording'])}", "info"])
    if b.get("batching"):
        rows.append(headline_batching(b["batching"]))
    return table(["#", "target", "measured", "status"], rows)


# ---- sections ----------------------------------------------------------------------------------------


def section_calls(c: Mapping[str, Any]) -> str:
    out = ["## 1. Model calls and tokens per query\n",
           f"{c['questions']} questions of `data/kb_queries.jsonl`, offline model (`llm=None`). Modes and "
           "definitions are `crag_lab.eval`'s (`mode_setup`): `knowledge_base` is crag_lab's default graph "
           "(complexity routing, pre-filter, batch grading); `per_item_grading` is one grader call per item, no "
           "pre-filter, no routing (`CragConfig(grading=\"per_item\", prefilter=False, routing=False)`), the "
           "design of LangGraph's and LlamaIndex's CRAG examples; `naive_rag` is `lab.ask(q, mode=\"naive_rag\")`. "
           "Shadow grading (replay data) is on, as in `crag-lab eval`; its calls are not counted. "
           "Calls and tokens are deterministic (no timing involved).\n"]
    rows = []
    for mode, m in c["modes"].items():
        q = m["quality"]
        rows.append([mode, f(m["calls_per_query"]), f(m["tokens_per_query"], 0), f(m["grader_calls_per_query"]),
                     f(m["grader_tokens_per_query"], 0), pct(q["answer_containment"]), pct(q["abstention_rate"]),
                     pct(q["false_abstention_rate"]), f(m["model_failures"]), f(m["wall_s"], 0)])
    out.append(table(["mode", "calls/q", "tokens/q", "grader calls/q", "grader tokens/q", "containment",
                      "abstention (unanswerable)", "false abstention", "failed model calls", "run s"], rows))
    if c.get("workers"):
        plans = "; ".join(f"process {i + 1}: {', '.join(plan)}" for i, plan in enumerate(c["workers"]))
        out.append(f"\nThe questions ran in {len(c['workers'])} processes at once, one torch thread each ({plans}); "
                   "`run s` of a mode is the sum of its slices' wall times, so it is not comparable with a run in "
                   "one process. Calls, tokens and answers do not depend on the split.\n")
    reused = {mode: m.get("records_reused_from_memory_run") for mode, m in c["modes"].items()
              if m.get("records_reused_from_memory_run")}
    if reused:
        listed = ", ".join(f"{mode}: the first {n}" for mode, n in reused.items())
        out.append(f"\nRecords reused from the 100-question run of §6 (same questions, same config, deterministic "
                   f"offline model) rather than run twice: {listed}; their run time (in that process) is included "
                   "in `run s`.\n")
    p = c["paired_containment"]
    out.append(f"\nPaired on answerable questions: contained only by crag_lab {p['contained_only_by_crag']}, only by "
               f"per_item_grading {p['contained_only_by_per_item']}.\n")
    extra = p.get("unanswerable_answered_by_crag_only")
    if extra is not None:
        listed = ", ".join(f"{x['id']} ({x['complexity']}, route {x['route']})" for x in extra) or "none"
        out.append(f"\nUnanswerable questions crag_lab answered where per_item_grading abstained: {listed}.\n")
    if all("quality_by_class" in m for m in c["modes"].values()):
        out.append("\n**Quality per labelled class** (containment / abstention on unanswerable / false abstention):\n")
        rows = []
        for mode, m in c["modes"].items():
            cells = []
            for cls in ("simple", "complex"):
                v = m["quality_by_class"].get(cls, {})
                cells.append(f"{pct(v.get('answer_containment'))} / {pct(v.get('abstention_rate'))} / "
                             f"{pct(v.get('false_abstention_rate'))}")
            rows.append([mode, *cells])
        out.append(table(["mode", "simple", "complex"], rows))
    out.append("\n**Per labelled question class** (mean / p95 / max):\n")
    rows = []
    for mode, m in c["modes"].items():
        for cls in ("chitchat", "simple", "complex", "all"):
            s = m["by_class"][cls]
            cell = [f"{f(s[k]['mean'])} / {f(s[k]['p95'], 1)} / {f(s[k]['max'], 0)}"
                    for k in ("calls", "tokens", "grader_calls", "grader_tokens")]
            rows.append([mode, cls, f(s["calls"]["n"]), *cell])
    out.append(table(["mode", "class", "n", "calls", "tokens", "grader calls", "grader tokens"], rows))
    routes = "; ".join(f"{mode}: " + ", ".join(f"{k} {v}" for k, v in m["routes"].items())
                       for mode, m in c["modes"].items())
    out.append(f"\nRoutes taken: {routes}.\n")
    w = c["worst_case"]
    out.append("\n**Worst case.** Every round of the loop is analyze + plan + grading, so with RE_RETRIEVE in every "
               "round and something surviving the last one:\n\n"
               f"- batch grading: **{w['formula_batch']}** calls (10 at the defaults);\n"
               f"- per-item grading: **{w['formula_per_item']}** (22 at the defaults).\n\n"
               "If nothing survives the last round, synthesize answers the abstention sentence without a call "
               "(one call fewer). Forced with `ScriptedLLM` (grader scores 0.05, optionally 0.5 in the last round) "
               "and a `StaticTool` returning top_k new items per call:\n\n")
    rows = [[r["grading"], r["max_iterations"], r["top_k"], f(r["last_round_keeps"]), r["calls"], r["formula"],
             " → ".join(r["actions"]), f(r["matches"])] for r in w["forced"]]
    out.append(table(["grading", "max_iterations", "top_k", "last round keeps", "calls", "formula", "actions",
                      "matches"], rows))
    ident = w["per_item_identity"]
    out.append(f"\nReal runs: batch-grading max {w['batch_observed_max']} calls (bound {w['batch_bound_at_config']}); "
               f"per-item identity calls = analyze + plan + new items + synthesize holds on "
               f"{ident['identity_holds']}/{ident['records']} questions; the most new items in one round was "
               f"{ident['max_new_items_in_a_round']} (the offline planner runs vector_search + keyword_search, "
               "and grep, per round), which is why per-item grading costs so much more than top_k + 2 per round.\n")
    return "\n".join(out)


def section_replay(r: Mapping[str, Any]) -> str:
    out = ["## 2. Replay speed\n",
           f"Source: a recorded `knowledge_base` run ({r['source']['records']} questions, "
           f"{r['source']['with_rounds']} with grading rounds). Those records were replicated (new ids) into "
           f"{r['replicated']['records']:,} records holding {r['replicated']['rounds']:,} rounds and "
           f"{r['replicated']['items']:,} graded items. Replay at the recorded thresholds flips nothing: "
           f"{f(r['recorded_thresholds_flip_nothing'])}. `Experiment.replay` (its default, vectorised engine) and "
           "the scalar reference (`engine=\"scalar\"`, one `replay_record` per query) alternate, medians of the "
           "repeats; CPU time is the replaying process's (equal to wall time on an idle machine, and the better "
           "number on a loaded one).\n"]
    rows = []
    for label, c in r["per_change"].items():
        rows.append([label, f(c["rounds_redecided"]), f(c["needs_rerun"]), f(c["replay_ms"]["cpu"], 1),
                     f(c["replay_ms"]["wall"], 1), f(c["scalar_ms"]["cpu"], 1), f(c["scalar_ms"]["wall"], 1),
                     f(c["speedup_wall"], 1)])
    out.append(table(["change", "rounds re-decided", "needs_rerun", "replay CPU ms", "replay wall ms",
                      "scalar CPU ms", "scalar wall ms", "speed-up (wall)"], rows))
    e = r["replay_ms"]
    out.append(f"\nReplay median {f(e['cpu_median'], 1)} ms CPU ({f(e['cpu_gc_off_median'], 1)} ms with the garbage "
               f"collector off). The first replay of an experiment also compiles its rounds into arrays: "
               f"{f(e['compile']['cpu'], 0)} ms CPU, once per experiment (once per dashboard). Its `QueryReplay` "
               f"lists equal the scalar reference's on {r['equal_to_scalar']} configurations (fixed and random "
               "thresholds, all aggregators, max_iterations 1–5, prefilter on/off).\n")
    out.append("\n**Where `Experiment.replay` spends its time** (cProfile, own time):\n\n")
    out.append(table(["function", "calls", "share of own time"],
                     [[p["function"], f(p["calls"]), pct(p["tottime_share"])] for p in r["profile_replay"]]))
    rr = r["rerun"]
    out.append(f"\nRe-running the graph on {rr['questions']} of the same questions at relevance_floor=0.4: "
               f"{f(rr['graph_ms_per_query']['median'], 0)} ms per question (median) vs "
               f"{f(rr['replay_ms_per_query']['median'], 3)} ms to replay one record "
               f"(×{f(rr['per_query_speedup'], 0)}); for the whole replicated set, about "
               f"{f(rr['estimated_graph_s_for_replicated_set'], 0)} s of graph time vs one replay "
               f"(×{f(rr['replay_vs_rerun_speedup'], 0)}).\n")
    return "\n".join(out)


def section_overhead(o: Mapping[str, Any]) -> str:
    e = o["engine"]
    out = ["## 3. Engine overhead per query\n",
           f"{e['questions']} questions (stratified), offline model, warm index and model. Tool time from timers "
           "wrapped around each tool, model time from the usage records' `latency_ms` (includes `call_model`'s "
           "wrapper; the offline model runs on the caller's thread, `crag_lab.models.runs_inline`), "
           "bookkeeping = total − tools − model. The bare retriever "
           "(`kb.vector_retriever(5).retrieve(q)`) runs right before or after each question, alternating.\n"]
    rows = []
    for route, s in [("all", e["all"]), *e["by_route"].items()]:
        rows.append([route, f(s["total_ms"]["n"])] + [f"{f(s[k]['median'], 1)} / {f(s[k]['p95'], 1)}"
                                                      for k in ("total_ms", "tools_ms", "model_ms", "bookkeeping_ms")])
    out.append(table(["route", "n", "total ms (median / p95)", "tools", "model", "bookkeeping"], rows))
    out.append(f"\nBookkeeping: {pct(e['bookkeeping_share_of_total'], 2)} of all query time "
               f"(median per query {pct(e['bookkeeping_share_median_per_query'], 2)}). Bare retriever "
               f"{f(e['bare_retriever_ms']['median'], 1)} ms median; engine/bare "
               f"{f(e['engine_vs_bare_retriever'], 1)}× (without model time "
               f"{f(e['engine_minus_model_vs_bare_retriever'], 1)}×).\n")
    out.append("\n**Noise-free bookkeeping**: the same graph with a model and a tool that answer instantly "
               "(what remains is LangGraph, node code, prompts, audit, citations):\n\n")
    rows = [[name, s["nodes"], s["model_calls"], f"{f(s['total_ms']['median'], 2)} / {f(s['total_ms']['p95'], 2)}",
             f(s["model_call_wrapper_ms"]["median"], 2), f(s["per_node_ms"], 2)] for name, s in o["scripted"].items()]
    out.append(table(["path", "nodes", "model calls", "total ms (median / p95)", "of which call_model wrapper ms",
                      "ms per node"], rows))
    return "\n".join(out)


def section_index(ix: Mapping[str, Any]) -> str:
    t = ix["throughput"]
    out = ["## 4. Index build, reload, incremental rebuild\n",
           f"{t['chunks']} chunks of `data/kb`; each build copies the folder and writes a fresh cache folder. "
           "Raw = `SentenceTransformer(model_dir(), device=\"cpu\").encode(texts, batch_size="
           f"{t.get('batch_size', 64)}, normalize_embeddings=True)` on exactly the texts the build embeds (the "
           "benchmark wraps the build's `embed_texts` and checks that it receives those texts, and that the "
           f"build's vectors equal the raw ones: max |difference| {sci(t.get('max_abs_vector_diff_vs_raw'))}). "
           f"Order {' → '.join(t.get('order', []))} (symmetric in time); medians of n = "
           f"{t['build_s']['n']} each, with the range.\n"]
    cpu = t.get("cpu_s", {})

    def spread(s: Mapping[str, Any]) -> str:
        return f"{f(s['median'], 2)} ({f(s['min'], 2)}–{f(s['max'], 2)})"

    out.append(table(["contender", "wall s median (range)", "chunks/s", "vs raw (wall)", "CPU s median",
                      "vs raw (CPU)"], [
        ["KnowledgeBase.build", spread(t["build_s"]), f(t["build_chunks_per_s"], 1), f(t["build_vs_raw"], 3),
         f(get(cpu, "build", "median"), 2), f(t.get("build_vs_raw_cpu"), 3)],
        ["SentenceTransformer.encode (raw)", spread(t["raw_encode_s"]), f(t["raw_chunks_per_s"], 1), "1",
         f(get(cpu, "raw_encode", "median"), 2), "1"],
    ]))
    pairs = t.get("build_vs_raw_per_pair")
    if pairs:
        out.append(f"\nRatio of each adjacent build/raw pair: {', '.join(f(x, 3) for x in pairs)}. CPU time is the "
                   "benchmark process's (all torch threads); on a busy machine the wall-time ratio drifts with the "
                   "load while the CPU ratio measures the work done.\n")
    if "build_encode_s" in t:
        out.append(f"\nInside the build, the model (`embed_texts`) took {f(t['build_encode_s']['median'], 2)} s; "
                   f"everything else (hashing, chunking, nodes, FAISS, docstore, writing, fsync) "
                   f"{f(t['build_minus_its_encode_s'], 2)} s. Model load (not in the build times): "
                   f"{f(t['model_load_s']['llamaindex'])} s.\n")
    pad = t.get("padded_tokens")
    if pad and "most_tokens_first" in pad:
        def extra(n: int) -> str:
            return f"{n:,} (+{pct(n / pad['real'] - 1, 0)})"

        out.append(f"\n**Where the time went, and why the build can beat the raw call.** The chunks hold "
                   f"{pad['real']:,} tokens (after the model's 256-token truncation). A batch pads every text to its "
                   "longest, so the order in which texts are cut into batches of 64 decides how many tokens the "
                   f"model runs: in file order, as LlamaIndex's `get_text_embedding_batch` batches and as the build "
                   f"used to, {extra(pad['file_order'])}; longest-by-characters first, as "
                   f"`SentenceTransformer.encode` sorts, {extra(pad['most_chars_first'])}; longest-by-tokens first, "
                   f"as `KnowledgeBase.build` now sorts (its `embed_texts` counts tokens with the model's own fast "
                   f"tokenizer, then puts the vectors back in chunk order), {extra(pad['most_tokens_first'])}. The "
                   "rest of the build (hashing, chunking, nodes, FAISS, docstore, writing) is the small remainder "
                   "above.\n")
    if not ix["targets"]["build_vs_raw_ge_0.9"]:
        out.append(f"\n**Target missed:** {f(t['build_vs_raw'], 3)}× < 0.9×. With the same texts, batches and "
                   "model, the build and the raw encode do the same model work; the gap is the build's own work "
                   f"above ({f(t.get('build_minus_its_encode_s'), 2)} s) plus the load-dependent noise shown by the "
                   "per-pair ratios.\n")
    rl = ix["reload"]
    cold = rl["cold"]
    out.append(f"\n**Reload.** Warm `KnowledgeBase.load` (same process): {f(rl['warm_load_ms']['median'], 1)} ms "
               "median. "
               f"Cold, fresh process: {f(cold['process_wall_s'])} s in all = import {f(cold['import_s'])} s + load "
               f"{f(cold['load_s'])} s + first query {f(cold['first_query_s'])} s (loads the embedding model), then "
               f"{f(cold['second_query_ms'], 1)} ms per query; peak RSS {f(cold['peak_rss_mib'], 0)} MiB.\n")
    inc = ix["incremental"]
    out.append(f"\n**Incremental rebuild** after appending to `{inc['file']}`: {f(inc['rebuild_s']['median'], 2)} s "
               f"({inc['chunks_embedded']} chunks embedded, {inc['chunks_reused']} reused; "
               f"{f(inc['vs_full_build'], 3)}× a full build). Rebuild with nothing changed: "
               f"{f(inc['unchanged_rebuild_s']['median'], 2)} s.\n")
    size = ix["size_on_disk"]
    files = ", ".join(f"{k} {v} KiB" for k, v in size["by_file_kib"].items())
    out.append(f"\n**Size on disk:** {size['total_kib']} KiB ({files}).\n")
    return "\n".join(out)


def section_scale(s: Mapping[str, Any]) -> str:
    out = ["## 5. Scale\n",
           f"1× is the real index ({s['base']['chunks']} chunks, dim {s['base']['dim']}). 10× and 100× are synthetic: "
           f"copy c of chunk i has the chunk's text and its vector plus Gaussian noise (σ = {s['noise_sigma']} per "
           "dimension, cosine ≈ 0.9 to the original), re-normalised, inserted through the same LlamaIndex "
           "`VectorStoreIndex` + `FaissVectorStore(IndexFlatIP)` path (no re-embedding), persisted and reloaded, "
           "each scale in a fresh process. Queries are the 140 real questions' embeddings (embedding time "
           "excluded; it does not grow with the index). For the ANN comparison a second synthetic set mixes "
           "random pairs of real chunk vectors (w·x_i + (1−w)·x_j + noise, w ∈ [0.2, 0.8]): near-duplicate copies "
           "make the exact top 5 a near-tie between copies of one chunk, which is harder for ANN than real data.\n"]
    rows = []
    for r in s["per_scale"]:
        q = r["query_ms"]
        rows.append([f"{r['scale']}×", f(r["chunks"]), f(r["build_s"]["total"], 2), f(r["reload_s"], 2),
                     f(q["llamaindex_retriever"]["median"], 3), f(q["faiss_flat"]["median"], 3),
                     f(q["faiss_flat_1_thread"]["median"], 3), f(r["disk_mib"], 1), f(r["faiss_file_mib"], 1),
                     f(r["peak_rss_mib"], 0)])
    out.append(table(["scale", "chunks", "build s (no embedding)", "reload s", "retriever ms", "FAISS flat ms",
                      "flat, 1 thread ms", "disk MiB", "of which FAISS MiB", "peak RSS MiB"], rows))
    g = s["growth_1x_to_100x"]
    last = s["per_scale"][-1]
    per_vector_us = 1000 * last["query_ms"]["faiss_flat_1_thread"]["median"] / last["chunks"]
    out.append(f"\nFlat search costs about {per_vector_us:.3f} µs per stored chunk (one thread, at 100×): "
               f"≈ {1 / per_vector_us * 1000:,.0f} chunks per millisecond of query latency, so a flat index stays "
               f"under 10 ms up to ≈ {10 / per_vector_us * 1000:,.0f} chunks.\n")
    out.append(f"\nFrom 1× to 100×: build ×{g['build_s']}, reload ×{g['reload_s']}, "
               f"retriever latency ×{g['retriever_ms']}, "
               f"flat search ×{g['flat_1_thread_ms']}, disk ×{g['disk_mib']}, peak RSS ×{g['peak_rss_mib']}.\n")
    ann_sets = (("100× synthetic near-duplicates (the index above)", s["ann_at_100x"]),
                ("100× synthetic mixtures", s.get("ann_at_100x_mixtures")),
                ("real HotpotQA passages", s.get("ann_real_hotpotqa")))
    for title, a in ann_sets:
        if not a:
            continue
        if "skipped" in a:
            out.append(f"\n**ANN on {title}:** {a['skipped']}.\n")
            continue
        out.append(f"\n**Flat vs ANN, {title}** ({a['chunks']:,} vectors, one thread, recall@5 against exact):\n\n")
        flat = a["flat"]["latency_ms"]
        rows = [["IndexFlatIP", "—", "1.000", f(flat["median"], 4), f(flat["p95"], 4), "—"]]
        for ef, v in a["hnsw"]["efSearch"].items():
            rows.append([f"IndexHNSWFlat M={a['hnsw']['M']}", f"efSearch={ef}", f(v["recall_at_5"], 3),
                         f(v["latency_ms"]["median"], 4), f(v["latency_ms"]["p95"], 4), f(a["hnsw"]["build_s"], 2)])
        for nprobe, v in a["ivf"]["nprobe"].items():
            rows.append([f"IndexIVFFlat nlist={a['ivf']['nlist']}", f"nprobe={nprobe}", f(v["recall_at_5"], 3),
                         f(v["latency_ms"]["median"], 4), f(v["latency_ms"]["p95"], 4), f(a["ivf"]["build_s"], 2)])
        out.append(table(["index", "parameter", "recall@5", "ms median", "ms p95", "build s"], rows))
    mixtures = s.get("ann_at_100x_mixtures") or s["ann_at_100x"]
    if "flat" in mixtures:
        flat_ms = mixtures["flat"]["latency_ms"]["median"]
        out.append(f"\n**Where `IndexFlatIP` should give way.** At 100× ({mixtures['chunks']:,} chunks) an exact flat "
                   f"search takes {flat_ms:.2f} ms, next to a query's hundreds of milliseconds of embedding and model "
                   "time (§3), and it is exact. The approximate indexes save under that much per query and cost "
                   "recall on near-duplicate data (HNSW and IVF need efSearch ≥ 128 or nprobe ≥ 16 to keep recall@5 "
                   f"near 0.96–0.99). A flat index stays under 10 ms up to ≈ {10 / per_vector_us * 1000:,.0f} chunks "
                   f"(about {10 / per_vector_us * 1000 / s['base']['chunks']:,.0f}× this knowledge base); "
                   "beyond that, HNSW (M=32, efSearch 128) is the first choice. "
                   "Below that size an ANN option does not pay, so crag_lab offers none.\n")
    return "\n".join(out)


def section_memory(m: Mapping[str, Any]) -> str:
    out = ["## 6. Peak memory\n",
           "RSS high-water mark of each workload in its own process (`os.wait4` → `ru_maxrss`).\n"]
    rows = []
    for key, v in m.items():
        if isinstance(v, Mapping) and "peak_rss_mib" in v:
            rows.append([key, f"`{v['command']}`", f(v["peak_rss_mib"], 0), f(v["wall_s"], 1),
                         f(v.get("rss_after_lab_mib"), 0), f(v.get("rss_after_run_mib"), 0)])
    out.append(table(["workload", "command", "peak RSS MiB", "wall s", "RSS after Lab MiB", "RSS after run MiB"], rows))
    for key, v in m.items():
        if isinstance(v, Mapping) and v.get("rss_at_run_quarters_mib"):
            out.append(f"\nRSS during `{key}` at 25 / 50 / 75 / 100 % of its run time: "
                       f"{' / '.join(f(x, 0) for x in v['rss_at_run_quarters_mib'])} MiB.\n")
    out.append(f"\nThe queries add {f(m['queries_cost_mib'], 0)} MiB to the peak of building the lab alone; the demo "
               f"{f(m['demo_over_baseline_mib'], 0)} MiB.\n")
    return "\n".join(out)


def section_latency(lat: Mapping[str, Any]) -> str:
    out = ["## 7. Offline latency per question, before and after the offline-model redesign\n",
           f"`bench/bench_latency.py`: the engine at commit `{lat['before_commit']}` (checked out with `git worktree`) "
           "and this checkout answer the same labelled KB questions one at a time, each engine in its own process "
           "(models loaded and a warm-up question asked first), question by question: each question goes to every "
           "engine in turn, the order rotating from question to question, while the others wait. This checkout runs "
           "twice, each on a fresh copy of an index folder built once: *cold* (the index alone, a first session: a "
           "chunk's sentences are encoded the first time a question meets it, then stored) and *prepared* (the index "
           "after `Lab.prepare()`, which encodes every chunk's sentences once per index: "
           f"{' s, '.join(f(s, 1) for s in lat.get('prepare_s', []))} s here; every later session on the index is in "
           "this state). Chitchat is left out of `all`.\n"]
    engines = ("before", "now_cold", "now_prepared")
    rows = [[k, f(lat["before"][k]["n"]), *(f(lat[e][k]["p50_ms"], 0) for e in engines),
             f(lat.get("ratio_p50_now_prepared", {}).get(k), 2), *(f(lat[e][k]["p95_ms"], 0) for e in engines)]
            for k in ("all", "simple", "complex")]
    out.append(table(["questions", "n", "p50 before ms", "p50 cold ms", "p50 prepared ms", "prepared / before",
                      "p95 before ms", "p95 cold ms", "p95 prepared ms"], rows))
    return "\n".join(out)


def section_frontier(fr: Mapping[str, Any]) -> str:
    out = ["## 8. Threshold frontier\n",
           f"`bench/bench_frontier.py`: `Experiment.frontier` replays `{fr['recording']}` ({fr['questions']} questions) "
           f"at {fr['settings']} threshold settings at once; the scalar reference is looped over "
           f"{fr['scalar_sample']['settings']} sampled settings in the same run and extrapolated. Equal on "
           f"{fr['equal_on_sample']} sampled settings.\n"]
    out.append(table(["settings", "frontier wall s", "frontier CPU s", "ms / setting", "scalar s (extrapolated)", "ratio",
                      "Pareto points"],
                     [[f(fr["settings"]), f(fr["frontier_s"]["wall"], 2), f(fr["frontier_s"]["cpu"], 2),
                       f(fr["per_setting_ms"], 3), f(fr["scalar_s_extrapolated"], 0), f"{f(fr['speedup'], 0)}×",
                       f(fr["pareto_points"])]]))
    return "\n".join(out)


def section_regrade(rg: Mapping[str, Any]) -> str:
    out = ["## 12. Regrading a recording against re-running it\n",
           f"`bench/bench_regrade.py`: `Experiment.regrade` regrades `{rg['recording']}` ({rg['questions']} questions, "
           f"{rg['items_graded']} items in {rg['grading_calls']} grading calls) with the offline grader behind a "
           "response cache, then replays it at the recorded thresholds and computes the frontier of the default grid. "
           "The first regrade fills the cache (*cold*); the cached ones read it "
           f"({pct(rg['cache_hits'])} of grading calls answered from the cache). The re-run answers the same "
           "questions with `Lab.run` (the offline model, the graph end to end). Cached regrade and re-run alternate "
           "in one process, three of each, medians. The cached regrade reproduces the recording's grades: "
           f"{f(rg['reproduces_recording'])}.\n"]
    c, k = rg["cold_s"], rg["cached_s"]
    out.append(table(["", "regrade s", "replay s", "frontier s", "total s", "re-run s", "re-run / total"],
                     [["cold (grader runs)", f(c["regrade"], 2), f(c["replay"], 3), f(c["frontier"], 2),
                       f(c["total"], 2), f(rg["rerun_s"], 1), f"{f(rg['ratio_cold'], 1)}×"],
                      ["cached grader", f(k["regrade"], 2), f(k["replay"], 3), f(k["frontier"], 2),
                       f(k["total"], 2), f(rg["rerun_s"], 1), f"{f(rg['ratio'], 1)}×"]]))
    out.append(f"\nThe offline model re-runs a question in {f(rg['rerun_s_per_question'], 3)} s; a real model is "
               "what makes a re-run take minutes (section 10), while a cached regrade makes no model call. The "
               "re-runs share this process with the cold regrade, so they are warm: the vectors and the answer "
               "scorer's memory of scored (question, unit) pairs already hold what they read. Reading the items "
               "from scratch is what the cold regrade's time measures.\n")
    return "\n".join(out)


SECTIONS = {"calls": section_calls, "replay": section_replay, "overhead": section_overhead, "index": section_index,
            "scale": section_scale, "memory": section_memory, "latency": section_latency,
            "frontier": section_frontier, "scaleout": section_scaleout, "realmodel": section_realmodel,
            "export": section_export, "regrade": section_regrade, "batching": section_batching}


def render(results: Mapping[str, Any]) -> str:
    m = results["machine"]
    v = m["versions"]
    b = results["benchmarks"]
    out = ["# crag_lab benchmarks\n",
           "Generated by `bench/run_all.py` (`make bench`); raw numbers in `bench/results.json`. "
           "**Absolute times depend on the machine and on its load**; every ratio is measured side by side in one "
           "run (contenders interleaved, medians), so ratios hold under load while absolute milliseconds do not. "
           "Model calls and tokens are deterministic.\n",
           f"- Command: `{results['command']}` — started {results['started']}, {f(results['total_wall_s'], 0)} s in all"
           + (" — **QUICK MODE: fewer queries and repeats, not for reporting**" if results.get("quick") else ""),
           f"- Machine: {m['cpu']}, {m['logical_cores']} logical cores ({m['physical_cores']} physical), "
           f"{m['ram_gib']} GiB RAM, {m['os']}; torch threads {m['torch_threads']}",
           f"- Load average (1/5/15 min) at start: {', '.join(str(x) for x in m['load_average'])}; at end: "
           f"{', '.join(str(x) for x in results.get('load_average_end', []))}",
           f"- Python {m['python']}; langgraph {v.get('langgraph')}, llama-index-core {v.get('llama-index-core')}, "
           f"faiss-cpu {v.get('faiss-cpu')}, torch {v.get('torch')}, sentence-transformers "
           f"{v.get('sentence-transformers')}, transformers {v.get('transformers')}, numpy {v.get('numpy')}\n"]
    failures = {k: r for k, r in results["runs"].items() if not r.get("ok")}
    for name, run in failures.items():
        out.append(f"> **{name} failed** (exit {run.get('returncode')}); see its output in the `make bench` log.\n")
    model_failures = sum(get(b, "calls", "modes", mode, "model_failures") or 0
                         for mode in ("knowledge_base", "naive_rag", "per_item_grading"))
    if model_failures or get(b, "replay", "source", "model_failures"):
        out.append(f"> **Warning:** {model_failures} model calls failed every retry in the recorded runs (e.g. the "
                   "grader could not load its calibration); grading numbers are not valid until that is fixed.\n")
    out.append("## Headline\n")
    out.append(headline(b, results))
    out.append("\nPer-benchmark process (wall time, CPU time of the process tree, peak RSS, 1-minute load average "
               "before → after):\n")
    out.append(table(["benchmark", "ok", "wall s", "CPU s", "peak RSS MiB", "load before → after"],
                     [[k, f(r.get("ok")), f(r.get("wall_s"), 0), f(r.get("cpu_s"), 0), f(r.get("peak_rss_mib"), 0),
                       f"{(r.get('load_average_before') or [NA])[0]} → {(r.get('load_average_after') or [NA])[0]}"
                       + (" (previous run)" if r.get("from_previous_run") else "")]
                      for k, r in results["runs"].items()]))
    for name, fn in SECTIONS.items():
        if name in b:
            out.append("\n" + fn(b[name]))
    return "\n".join(out).rstrip() + "\n"
