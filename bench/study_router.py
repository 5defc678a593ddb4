"""The learned router against the rules, on messages neither was trained on.

Routers compared (all through `crag_lab.offline.router`, each given the offline model's vector cache):

- ``rules``: the phrase rules, chitchat prototypes and complexity rules (``CRAG_OFFLINE_ROUTER=rules``);
- ``learned``: the default, `crag_lab.learned.LearnedRouter`: a head over the MiniLM vector (trained by
  ``python -m crag_lab.learned.train_router`` on public chit-chat and SQuAD v1.1 train questions) and a
  LoRA-tuned MiniLM reading the message's tokens (``fit_router.py``), complex when either finds
  complex likelier than simple (`LearnedRouter.combine`);
- ``token reader alone``: the tuned MiniLM's own decision, an ablation; ``--baseline-dir`` with the
  head's folder before the token reader shipped gives the head alone;
- hybrids with the rules, as an ablation: ``learned+phrases`` (the rules' two phrase lists for chitchat first, then
  the learned router), ``learned chitchat + rule complexity`` (the learned router decides chitchat
  or not, the complexity rules decide simple or complex), ``learned, rules below p`` (the learned
  router unless its probability is below `FALLBACK_P`, then the rules) and ``learned or complex
  rule`` (complex when either says so). Which one would ship is decided on the training data's
  held-out validation messages, not on the sets below.

Sets: (a) the KB tuning and test splits (labelled; the rules were written with them in view, the
learned router never saw them); (b) chit-chat turns of held-out conversations of the training corpus
(openers and closers, then any turn); (c) SQuAD 2.0 dev questions (one fact: simple, answerable or
not); (d) HotpotQA dev questions (multi-hop: complex); (e) greetings, thanks and small talk in several
languages and registers, and (f) requests and terse queries (simple), both written by this team
(`OWN_CHITCHAT`, `OWN_SIMPLE`) before any result was seen: not independent; (g) with ``--chatterbot
DIR``, the held-out dialogues of the ChatterBot corpus in its 27 languages other than English
(`crag_lab.learned.chatterbot_data`: small talk, and the opening questions of its encyclopedic topics;
labelled by topic, so a few "questions" are small talk with the bot); (h) with ``--mintaka FILE``, the held-out
questions of Mintaka dev in its 8 translations (`crag_lab.learned.mintaka_data`: simple or complex by
Mintaka's complexity type; held out from a router trained with ``--mintaka``, but of the same
source, so not independent of it); (i) with ``--clinc FILE``, CLINC150's held-out intents
(`crag_lab.learned.clinc_data`: what people type to an assistant, small talk or a request for facts; whole
intents held out from a router trained with ``--clinc``, of the same source). Then the routing accuracy,
containment and abstention end to end (``crag-lab eval`` on the test split, once per router,
``CRAG_OFFLINE_ROUTER``), and the time per message.

``.venv/bin/python bench/study_router.py`` writes ``docs/dev/router.md`` and ``.json``; the shared
sets are skipped, saying so, when absent. ``--baseline-dir`` adds an earlier head as one more column
(routing only; the end-to-end runs use the head that ships), for a before/after. ``--end-to-end-only`` re-runs
only the end-to-end runs and keeps the routing tables ``docs/dev/router.json`` holds: for a change that cannot
move a route (the synthesizer's), without the training sources the routing tables read.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, SHARED_DATASETS, log, publish

from crag_lab.learned import chatterbot_data, clinc_data, mintaka_data, router_data
from crag_lab.learned.router import LearnedRouter
from crag_lab.learned.train_router import router_names
from crag_lab.offline import router
from crag_lab.offline.text import content_terms
from crag_lab.offline.vectors import VectorCache

OUT = ROOT / "docs" / "dev" / "router.md"
TRAIN_DIR = ROOT.parent / "shared" / "train"
SPLITS = {"KB tuning": ROOT / "data" / "kb_queries.jsonl", "KB test": ROOT / "data" / "kb_queries_test.jsonl"}
FALLBACK_P = 0.6
"""``learned, rules below p``: below this probability the learned router defers to the rules."""

# Written by the same team as the router, before any result was seen (2026-11-26): not independent.
OWN_CHITCHAT = (
    "hey", "Hello!", "hi :)", "Good evening.", "yo, what's up", "Howdy partner", "morning!",
    "Thank you very much for your help.", "thx!!", "cheers mate", "Much appreciated.", "ty",
    "bye for now", "Talk to you tomorrow.", "Have a lovely weekend!", "gotta go, later",
    "How's your day going?", "Are you a real person?", "what's your name?", "I'm bored.",
    "lol that's funny", "Sorry, my mistake.", "never mind", "You're awesome.", "Nice to meet you!",
    "Dear assistant, I hope this message finds you well.", "Greetings and salutations.",
    "Hallo, wie geht's?", "Danke schön!", "Bonjour, ça va ?", "Merci beaucoup", "¡Hola! ¿Qué tal?",
    "Gracias, muy amable.", "Ciao, come stai?", "Goedemorgen!", "Dank je wel", "Olá, tudo bem?",
    "Hej hej", "Привет!", "こんにちは", "你好", "Tschüss, bis morgen!", "Au revoir !",
    "What can you help me with?", "Do you speak French?", "Tell me about yourself.",
)
OWN_SIMPLE = (
    "list the services owned by the payments team", "show me the on-call rota", "Give me the admin port.",
    "retention policy for logs", "default timeout", "gateway TLS port", "postgres version?",
    "Find the runbook for certificate rotation.", "I need the Slack channel of the identity team",
    "Tell me where the deploy pipeline config lives.", "owner of search-service", "max upload size",
    "how do I restart the worker?", "What does the ledger service do?", "explain the release train",
)
COMPARISON_WORDS = (" or ", "both", "same", "first", "older", "younger", "earlier", "later", "more ", "fewer",
                    "larger", "longer", "higher")



def routers(cache: VectorCache, learned: LearnedRouter,
            baseline: tuple[str, LearnedRouter] | None = None) -> dict[str, Callable[[str], str]]:
    """Each router under study, as a function of the message (``baseline``: an earlier learned head, by name)."""

    def rules(q: str) -> str:
        return router.explain(q, cache)[0]

    def learned_only(q: str) -> str:
        return learned.route(q, cache).complexity

    def tokens_only(q: str) -> str:
        route = learned.route(q, cache)
        votes = route.votes.get("tokens")
        if votes is None:
            return learned_only(q)
        decided = learned.other_languages if route.language == "other" else learned  # whose reader voted
        threshold = (decided or learned).tuned.get("chitchat_min", {}).get("value", 0.5)
        alone = LearnedRouter(learned.classes, learned.layers, chitchat_min=threshold)
        return learned.classes[int(alone.decide(np.array([[votes[c] for c in learned.classes]]))[0])]

    def phrases_first(q: str) -> str:
        text = q.strip()
        if len(content_terms(text)) <= 6 and (router._CHITCHAT.match(text) or router._ABOUT_ASSISTANT.match(text)):
            return "chitchat"
        return learned_only(q)

    def chit_then_rules(q: str) -> str:
        if learned_only(q) == "chitchat":
            return "chitchat"
        return "complex" if any(p.search(q) for _, p in router.COMPLEX_RULES) or q.count("?") > 1 else "simple"

    def fallback(q: str) -> str:
        route = learned.route(q, cache)
        return route.complexity if route.probability >= FALLBACK_P else rules(q)

    def either_complex(q: str) -> str:
        best = learned_only(q)
        if best == "simple" and (any(p.search(q) for _, p in router.COMPLEX_RULES) or q.count("?") > 1):
            return "complex"
        return best

    earlier = {} if baseline is None else {baseline[0]: lambda q: baseline[1].route(q, cache).complexity}
    return {"rules": rules, **earlier, "token reader alone": tokens_only, "learned": learned_only,
            "learned+phrases": phrases_first,
            "learned chitchat + rule complexity": chit_then_rules, f"learned, rules below p={FALLBACK_P}": fallback,
            "learned or complex rule": either_complex}


def score(route: Callable[[str], str], rows: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Accuracy, recall per class, and what each class was routed to."""
    got = [(label, route(q)) for q, label in rows]
    out: dict[str, Any] = {"n": len(got), "accuracy": float(np.mean([a == b for a, b in got])) if got else None}
    questions = [b for a, b in got if a != "chitchat"]
    if questions:  # a question answered with small talk gets no answer at all
        out["questions to chitchat"] = sum(b == "chitchat" for b in questions)
    for label in router_data.CLASSES:
        mine = [b for a, b in got if a == label]
        if mine:
            out[f"recall {label}"] = float(np.mean([b == label for b in mine]))
            out[f"routed {label}"] = {c: mine.count(c) for c in router_data.CLASSES if mine.count(c)}
    return out


def held_out_chitchat(n: int = 600, seed: int = 7) -> list[str] | None:
    path = TRAIN_DIR / "chitchat.jsonl.gz"
    if not path.is_file():
        log(f"skipping held-out chit-chat: {path} not found")
        return None
    rows = [r for r in router_data.read_jsonl(path)
            if router_data.held_out(f"conv/{str(r['id']).rsplit('/', 1)[0]}")]
    return [m.text for m in router_data.chitchat_messages(rows, n, random.Random(seed))]


def validation_messages(trained: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """The training script's own validation messages (held-out articles and conversations)."""
    if not TRAIN_DIR.is_dir():
        return None
    # The token reader's validation messages (names from code swapped in) when the router has one: the pair's.
    names = router_names() if (trained.get("tuned") or {}).get("messages", {}).get("names") else []
    _, val = router_data.build(TRAIN_DIR, per_class=int(trained.get("per_class", 10_000)),
                               val_per_class=int(trained.get("val_per_class", 1_000)), seed=int(trained.get("seed", 13)),
                               names=names)
    return [(m.text, m.label) for m in val]


def shared_questions(name: str) -> list[str] | None:
    folder = SHARED_DATASETS / name
    if not folder.is_dir():
        log(f"skipping {name}: {folder} not found")
        return None
    return [str(r["question"]) for r in router_data.read_jsonl(folder / "queries.jsonl")]


def latency(cache_factory: Callable[[], VectorCache], learned: LearnedRouter, messages: Sequence[str]) -> dict[str, Any]:
    """Milliseconds per message: rules and learned with a cold vector cache (the message is embedded),
    and the learned router on a vector the pipeline already holds (the head, and the token reader's
    own pass over the message, which is not cached: every message is new to it)."""
    out: dict[str, Any] = {}
    for name, fn in (("rules (cold)", lambda c, q: router.explain(q, c)),
                     ("learned (cold)", lambda c, q: learned.route(q, c)),
                     ("learned (vector cached)", lambda c, q: learned.route(q, c))):
        cache = cache_factory()
        if learned.tuned:
            learned.token_reader.forget()
        if "cached" in name:
            for q in messages:
                cache.query(q)
        times = []
        for q in messages:
            t = time.perf_counter()
            fn(cache, q)
            times.append((time.perf_counter() - t) * 1000)
        out[name] = {"p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95))}
    return out


E2E_KEYS = ("routing_accuracy", "chitchat_recall", "answer_containment", "answer_f1", "citation_precision",
            "abstention_rate", "false_abstention_rate", "calls_per_query", "latency_ms_per_query")


def end_to_end(names: Sequence[str]) -> dict[str, Any]:
    """``crag-lab eval`` (knowledge_base mode) on both KB splits, once per router (``CRAG_OFFLINE_ROUTER``)."""
    out: dict[str, Any] = {}
    exe = ROOT / ".venv" / "bin" / "crag-lab"
    for split, path in SPLITS.items():
        for name in names:
            with tempfile.TemporaryDirectory() as tmp:
                target = Path(tmp) / "eval.json"
                env = {**os.environ, "CRAG_OFFLINE_ROUTER": name}
                cmd = [str(exe), "eval", "--dataset", str(path.relative_to(ROOT)), "--kb", "data/kb",
                       "--mode", "knowledge_base", "--json", str(target), "--no-progress", "--journal-dir",
                       str(Path(tmp) / "journal")]
                log(f"end to end: {split}, {name}")
                subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
                data = json.loads(target.read_text(encoding="utf-8"))
                out[f"{split}, {name}"] = {k: data.get(k) for k in E2E_KEYS}
    return out


def card(learned: LearnedRouter) -> dict[str, Any]:
    """How a router was trained, in short: the head's settings, its threshold and its token reader's."""
    return {**{k: learned.trained.get(k) for k in ("seed", "per_class", "hidden", "epochs")},
            "chitchat_min": learned.chitchat_min,
            **({"token_reader": {**{k: learned.tuned.get("fit", {}).get(k) for k in ("rank", "epochs", "lr")},
                                 "pair_chitchat_min": learned.tuned.get("chitchat_min", {}).get("value")}}
               if learned.tuned else {})}


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def markdown(result: Mapping[str, Any]) -> str:
    sets = result["sets"]
    names = list(next(iter(sets.values())).keys())
    lines = ["# The learned router against the rules", "",
             "Generated by `bench/study_router.py` (not by `make eval`); the sets are described in its docstring. "
             "Accuracy, then recall of each class present (chitchat / simple / complex), then [in brackets] "
             "how many questions were routed to chitchat (they get no answer at all; none when absent).", "",
             "| set | n | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for set_name, per in sets.items():
        first = next(iter(per.values()))
        cells = []
        for name in names:
            s = per[name]
            recalls = "/".join(pct(s.get(f"recall {c}")).replace(" %", "") for c in router_data.CLASSES
                               if f"recall {c}" in s)
            to_chat = f" [{s['questions to chitchat']}]" if s.get("questions to chitchat") else ""
            cells.append(f"**{pct(s['accuracy'])}**" + (f" ({recalls})" if len(recalls.split("/")) > 1 else "")
                         + to_chat)
        lines.append(f"| {set_name} | {first['n']} | " + " | ".join(cells) + " |")
    if result.get("hotpot_split"):
        lines += ["", "HotpotQA dev has no question-type field here; split by whether the question *looks* like a "
                  "comparison (contains one of " + ", ".join(repr(w.strip()) for w in COMPARISON_WORDS) + "), "
                  "share routed complex:", "", "| part | n | " + " | ".join(names) + " |",
                  "|---|---|" + "---|" * len(names)]
        for part, per in result["hotpot_split"].items():
            lines.append(f"| {part} | {next(iter(per.values()))['n']} | "
                         + " | ".join(pct(per[n]['accuracy']) for n in names) + " |")
    if result.get("end_to_end"):
        lines += ["", "End to end: `crag-lab eval --dataset data/kb_queries[_test].jsonl --kb data/kb --mode "
                  "knowledge_base` with `CRAG_OFFLINE_ROUTER` set to each router (answers contained, F1, "
                  "citation precision and abstention as `crag-lab eval` defines them):", "",
                  "| split, router | " + " | ".join(E2E_KEYS) + " |", "|---|" + "---|" * len(E2E_KEYS)]
        for row, vals in result["end_to_end"].items():
            lines.append(f"| {row} | " + " | ".join(
                "–" if vals.get(k) is None else (f"{vals[k]:.1f}" if k.endswith(("_query",)) else pct(vals[k]))
                for k in E2E_KEYS) + " |")
    lines += ["", "(Latency per question end to end moves with whatever else shares the two CPU cores; compare "
              "it within one run only.)", "", "Time to route one message (KB test questions, ms, two shared CPU cores):",
              "", "| router | p50 | p95 |", "|---|---|---|"]
    lines += [f"| {name} | {t['p50_ms']:.2f} | {t['p95_ms']:.2f} |" for name, t in result["latency"].items()]
    lines += ["", "\"cold\": the message's vector is not yet in the cache (the learned router embeds it once, "
              "about one MiniLM call; the rules embed only short messages, lower-cased, for the prototypes). "
              "\"vector cached\": the pipeline already holds the question's vector, which it computes anyway "
              "to read the evidence, so routing costs the head (0.03 ms) and the token reader's pass over the "
              "message.", "",
              "How to read this: `learned` is the router that ships, the English pair and, for a message "
              "`spelling.other_language` reads as not English, the pair for other languages (its Mintaka row is "
              "held out from that pair's training but of the same source). The learned router's readers and "
              "every hybrid were trained without the KB, "
              "SQuAD 2.0 dev, HotpotQA dev or the two hand-written sets; the rules were written with both KB "
              "splits in view, so on those two rows the rules and every hybrid using them are not held out. "
              "The first row (validation messages from held-out training articles, conversations and "
              "documents, made by the training templates) favours the token reader alone. The pair that "
              "ships (`learned`: complex when either reader says so) was chosen for the cost of the two "
              "mistakes (a multi-fact question on the one-fact path loses its grading; the reverse costs a "
              "grading call) **after** the rows below had been seen, so those rows are not a blind test of "
              "that choice (`crag_lab/_data/router/DATA_CARD.md`).", "",
              f"Learned router: {json.dumps(result['card'])}"]
    if result.get("baseline"):
        lines += ["", f"\"{result['baseline']['name']}\": the router in {result['baseline']['folder']}, "
                  f"{json.dumps(result['baseline']['card'])}"]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--no-eval", action="store_true", help="skip the end-to-end crag-lab eval runs")
    parser.add_argument("--end-to-end-only", action="store_true",
                        help="re-run only the end-to-end runs, keeping the routing tables of docs/dev/router.json "
                             "(after a change that cannot move a route, such as the synthesizer's)")
    parser.add_argument("--router-dir", help="a trained router's folder (default: the one that ships)")
    parser.add_argument("--baseline-dir", help="an earlier router's folder, compared as one more column")
    parser.add_argument("--baseline-name", default="learned (earlier)", help="that column's name")
    parser.add_argument("--baseline-label", help="where that head comes from, for the report (default: its folder)")
    parser.add_argument("--chatterbot", help="the chatterbot-corpus data folder: adds its held-out dialogues in languages "
                                             "other than English (crag_lab.learned.chatterbot_data; labelled by topic)")
    parser.add_argument("--clinc", help="data/data_full.json of github.com/clinc/oos-eval: adds its held-out intents "
                                        "(crag_lab.learned.clinc_data)")
    parser.add_argument("--mintaka", help="data/mintaka_dev.json of github.com/amazon-science/mintaka: adds its held-out "
                                          "questions in 8 other languages (crag_lab.learned.mintaka_data)")
    args = parser.parse_args(argv)
    if args.end_to_end_only:  # a change that cannot move a route (the synthesizer's): routing as recorded
        result = json.loads(OUT.with_suffix(".json").read_text(encoding="utf-8"))
        result["end_to_end"] = end_to_end(router.ROUTERS)
        publish(OUT, markdown(result), result, write=not args.no_write)
        return 0
    learned = LearnedRouter.load(args.router_dir)
    cache = VectorCache()
    baseline = LearnedRouter.load(args.baseline_dir) if args.baseline_dir else learned
    fns = routers(cache, learned, (args.baseline_name, baseline) if args.baseline_dir else None)
    data: dict[str, list[tuple[str, str]]] = {}
    val = validation_messages(learned.trained)
    if val is not None:
        data["validation (held-out train sources; picks a hybrid)"] = val
    for split, path in SPLITS.items():
        data[split] = [(r["question"], r["complexity"]) for r in router_data.read_jsonl(path)]
    chat = held_out_chitchat()
    if chat is not None:
        data["held-out chit-chat turns"] = [(q, "chitchat") for q in chat]
    squad = shared_questions("squad2_dev250")
    if squad is not None:
        data["SQuAD 2.0 dev (simple)"] = [(q, "simple") for q in squad]
    hotpot = shared_questions("hotpotqa_distractor_dev250")
    if hotpot is not None:
        data["HotpotQA dev (complex)"] = [(q, "complex") for q in hotpot]
    if args.chatterbot:
        _, corpus_val = chatterbot_data.split(chatterbot_data.read(args.chatterbot), seed=13)
        other = [m for m in corpus_val if m.source != "chatterbot/english"]
        data["ChatterBot held-out dialogues, 27 other languages: small talk"] = [
            (m.text, m.label) for m in other if m.label == "chitchat"]
        data["ChatterBot held-out dialogues, 27 other languages: opening questions"] = [
            (m.text, m.label) for m in other if m.label == "simple"]
    if args.mintaka:
        _, questions = mintaka_data.split(mintaka_data.read(args.mintaka), seed=13)
        data["Mintaka dev held-out questions, 8 other languages"] = [(m.text, m.label) for m in questions]
    if args.clinc:
        _, queries = clinc_data.split(clinc_data.read(args.clinc), seed=13)
        for label, name in (("chitchat", "small talk"), ("simple", "requests and questions")):
            data[f"CLINC150 held-out intents: {name}"] = [(m.text, m.label) for m in queries if m.label == label]
    data["own greetings/thanks/small talk (not independent)"] = [(q, "chitchat") for q in OWN_CHITCHAT]
    data["own requests and terse queries (not independent)"] = [(q, "simple") for q in OWN_SIMPLE]
    sets: dict[str, dict[str, Any]] = {}
    for set_name, rows in data.items():
        log(f"router study: {set_name} ({len(rows)})")
        sets[set_name] = {name: score(fn, rows) for name, fn in fns.items()}
    hotpot_split = None
    if hotpot is not None:
        looks = [q for q in hotpot if any(w in q.lower() for w in COMPARISON_WORDS)]
        rest = [q for q in hotpot if q not in looks]
        hotpot_split = {"looks like a comparison": {n: score(f, [(q, "complex") for q in looks]) for n, f in fns.items()},
                        "the rest (mostly bridge)": {n: score(f, [(q, "complex") for q in rest]) for n, f in fns.items()}}
    sample = [q for q, _ in data["KB test"]]
    result = {"sets": sets, "hotpot_split": hotpot_split,
              "latency": latency(VectorCache, learned, sample),
              "end_to_end": None if args.no_eval else end_to_end(router.ROUTERS),
              "card": {**card(learned), **({"other_languages": card(learned.other_languages)}
                                            if learned.other_languages is not None else {})},
              "baseline": None if not args.baseline_dir else {
                  "name": args.baseline_name, "folder": args.baseline_label or args.baseline_dir,
                  "card": card(baseline)}}
    publish(OUT, markdown(result), result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
