"""Labelled (question, items) groups for the offline grader's fit and for its held-out measurement.

A group is one question, the items a retriever would hand the grader for it, and one label per item:
"this item helps answer the question" — it holds the labelled answer location. Every domain is cut
the way the knowledge base cuts it (items are chunks or passages written as `passage_markdown`).

Fitted on (training sources; none is an evaluation set, none was seen by the answer scorer):

- ``kb``: the knowledge base's tuning questions and the items its two tools return for them.
- ``squad``: questions of the SQuAD v1.1 train articles the scorer held out (`held_out_titles`), each
  against its own paragraph and the 7 paragraphs of the held-out articles nearest to it by MiniLM;
  a quarter also against the 8 nearest paragraphs of *other* articles (every item negative), and
  the SQuAD 2.0 train excerpt's held-out unanswerable questions against their paragraph and its
  neighbours (every item negative).
- ``docs``: templated questions (`crag_lab.learned.data.doc_pairs`) over the READMEs the scorer
  held out, each against the chunk holding the answer and the 7 nearest chunks of the same README;
  a quarter also against another README's 8 nearest chunks (every item negative).
- ``multihop`` (with ``fit_grader.py --multihop DIR``): multi-hop questions people wrote, from their
  **train** splits, with the paragraphs they came with (`multihop_groups`): HotpotQA train in the
  distractor setting (10 paragraphs, the supporting ones gold) and MuSiQue train (its supporting
  paragraphs and the non-supporting ones nearest the question by MiniLM, 10 in all).

Measured only (evaluation sets, never fitted): ``kb-test`` (the frozen test split, as ``kb``) and
``hotpotqa`` (HotpotQA distractor dev: each question's 10 paragraphs, the 2 supporting ones gold).
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crag_lab.learned.router_data import read_jsonl
from crag_lab.offline.vectors import VectorCache, passage_key

CANDIDATES = 8
"""Items per question, as a retriever's top-k would hand them to the grader."""
PER_TOOL = 8
UNANSWERABLE_SHARE = 0.25
MULTIHOP_ITEMS = 10
"""Items per MuSiQue question (it comes with 20), as many as a HotpotQA question brings."""


def group(domain: str, gid: str, query: str, items: list[dict[str, Any]], labels: list[bool]) -> dict[str, Any]:
    return {"id": gid, "query": query, "items": items, "labels": labels, "domain": domain}


def kb_groups(root: Path, queries: Path, domain: str) -> list[dict[str, Any]]:
    """Items the two knowledge-base tools return for each non-chitchat question, labelled by gold overlap;
    every item of an unanswerable question is negative."""
    from crag_lab.eval.metrics import GoldRef, is_gold
    from crag_lab.kb import KnowledgeBase
    from crag_lab.tools.kb_tools import kb_tools

    kb = KnowledgeBase.build(root / "data" / "kb")
    tools = {t.name: t for t in kb_tools(kb, PER_TOOL)}
    out = []
    for row in read_jsonl(queries):
        if row["complexity"] == "chitchat":
            continue
        gold = [GoldRef.parse(g) for g in row["gold"]]
        found: dict[tuple[Any, ...], dict[str, Any]] = {}
        for tool in ("vector_search", "keyword_search"):
            for hit in json.loads(tools[tool]({"query": row["question"], "top_k": PER_TOOL})):
                found.setdefault((hit["path"], hit["line"], hit["line_end"]), hit)
        hits = list(found.values())
        labels = [bool(row["answerable"]) and is_gold(h["path"], h["line"], h["line_end"], gold) for h in hits]
        out.append(group(domain, row["id"], row["question"], hits, labels))
    return out


def hotpot_groups(folder: Path) -> list[dict[str, Any]]:
    """Each HotpotQA question's 10 paragraphs, as the knowledge base would hold them."""
    from crag_lab.eval.datasets import Passage, passage_filename, passage_markdown

    corpus = {p["id"]: p for p in read_jsonl(folder / "corpus.jsonl")}
    out = []
    for q in read_jsonl(folder / "queries.jsonl"):
        gold = set(q["gold_doc_ids"])
        items = []
        for doc_id in q["context_doc_ids"]:
            doc = corpus[doc_id]
            items.append({"text": passage_markdown(Passage(doc_id, doc.get("title", ""), doc["text"])),
                          "title": doc.get("title", ""), "path": passage_filename(doc_id)})
        out.append(group("hotpotqa", q["id"], q["question"], items, [d in gold for d in q["context_doc_ids"]]))
    return out


def multihop_groups(folder: Path, cache: VectorCache) -> list[dict[str, Any]]:
    """``hotpotqa_train.json`` (HotpotQA's own format) and ``musique_train.json`` (MuSiQue's) in ``folder``,
    each question against its paragraphs (see the module). A file that is absent adds nothing."""
    from crag_lab.eval.datasets import Passage, passage_filename, passage_markdown

    def item(title: str, text: str) -> dict[str, Any]:
        pid = "mh-" + hashlib.sha1("\x00".join((title, text)).encode()).hexdigest()[:10]
        return {"text": passage_markdown(Passage(pid, title, text)), "title": title, "path": passage_filename(pid)}

    out = []
    hotpot = folder / "hotpotqa_train.json"
    for q in json.loads(hotpot.read_text(encoding="utf-8")) if hotpot.is_file() else []:
        gold = {title for title, _ in q["supporting_facts"]}
        items = [item(title, " ".join(sentences)) for title, sentences in q["context"]]
        out.append(group("multihop", f"hotpotqa-train/{q['_id']}", q["question"], items,
                         [title in gold for title, _ in q["context"]]))
    musique = folder / "musique_train.json"
    for q in json.loads(musique.read_text(encoding="utf-8")) if musique.is_file() else []:
        paragraphs = q["paragraphs"]
        items = [item(p["title"], p["paragraph_text"]) for p in paragraphs]
        vectors = _vectors(items, cache)
        gold = [i for i, p in enumerate(paragraphs) if p["is_supporting"]]
        others = [i for i in range(len(paragraphs)) if i not in gold]
        chosen = sorted(gold + _nearest(cache.query(q["question"]), vectors, others, MULTIHOP_ITEMS - len(gold)))
        out.append(group("multihop", f"musique-train/{q['id']}", q["question"], [items[i] for i in chosen],
                         [i in gold for i in chosen]))
    return out


def _vectors(items: Sequence[dict[str, Any]], cache: VectorCache) -> np.ndarray:
    """The vectors the index would hold for ``items``, encoded in batches and remembered by the cache."""
    keys = [passage_key(i["text"], i.get("path"), i.get("title")) for i in items]
    rows = [cache.group(keys[s:s + 32]) for s in range(0, len(keys), 32)]
    matrix = np.vstack(rows) if rows else np.zeros((0, 384), dtype=np.float32)
    cache.add(keys, matrix)
    return matrix


def _nearest(q_vec: np.ndarray, vectors: np.ndarray, pool: Sequence[int], k: int) -> list[int]:
    pool = list(pool)
    sims = vectors[pool] @ q_vec
    return [pool[j] for j in np.argsort(-sims, kind="stable")[:k]]


def squad_groups(train_dir: Path, cache: VectorCache, *, seed: int, questions: int) -> list[dict[str, Any]]:
    """Held-out SQuAD v1.1 train questions against their paragraph and its neighbours (see the module)."""
    from crag_lab.eval.datasets import Passage, passage_filename, passage_markdown
    from crag_lab.learned.train import held_out_titles

    rows = read_jsonl(train_dir / "squad11_train.jsonl.gz")
    held = held_out_titles(rows, seed)
    rows = [r for r in rows if r["title"] in held]
    excerpt = read_jsonl(train_dir / "squad2_train_excerpt.jsonl.gz")
    first = sorted({r["title"] for r in excerpt if r["is_impossible"]})[0]  # the title the scorer trained on
    excerpt = [r for r in excerpt if r["title"] != first]
    paragraphs: dict[str, int] = {}
    items: list[dict[str, Any]] = []
    for r in [*rows, *excerpt]:
        if r["context"] not in paragraphs:
            pid = f"squad-{hashlib.sha1(r['context'].encode()).hexdigest()[:10]}"
            title = str(r["title"]).replace("_", " ")
            paragraphs[r["context"]] = len(items)
            items.append({"text": passage_markdown(Passage(pid, title, r["context"])), "title": title,
                          "path": passage_filename(pid), "article": r["title"]})
    vectors = _vectors(items, cache)
    rng = random.Random(seed)
    out = []

    def add(gid: str, question: str, pool: Sequence[int], own: int | None, positive: bool) -> None:
        q_vec = cache.query(question)
        picks = _nearest(q_vec, vectors, [i for i in pool if i != own], CANDIDATES - (own is not None))
        chosen = ([own] if own is not None else []) + picks
        clean = [{k: v for k, v in items[i].items() if k != "article"} for i in chosen]
        out.append(group("squad", gid, question, clean, [positive and i == own for i in chosen]))

    in_held = [i for i, it in enumerate(items) if it["article"] in held]
    for r in rng.sample(rows, min(questions, len(rows))):
        own = paragraphs[r["context"]]
        add(r["id"], r["question"], in_held, own, True)
        if rng.random() < UNANSWERABLE_SHARE:
            add(f"{r['id']}/other", r["question"], [i for i in in_held if items[i]["article"] != r["title"]], None, False)
    unanswerable = [r for r in excerpt if r["is_impossible"]]
    for r in rng.sample(unanswerable, min(questions // 3, len(unanswerable))):
        pool = [i for i, it in enumerate(items) if it["article"] == r["title"]]
        add(r["id"], r["question"], pool, paragraphs[r["context"]], False)
    return out


def docs_groups(cache: VectorCache, *, names: Sequence[str], sites: Sequence[str], seed: int,
                per_doc: int) -> list[dict[str, Any]]:
    """Templated questions over the held-out READMEs against their chunks (see the module)."""
    from crag_lab.kb._chunking import iter_chunks
    from crag_lab.learned.data import doc_pairs
    from crag_lab.learned.train import documentation

    wanted = set(names)
    docs = [(name, body) for name, _, _, body in documentation(sites) if name in wanted]
    rng = random.Random(seed)
    chunked: list[tuple[str, list[dict[str, Any]], np.ndarray, dict[int, int]]] = []
    for name, body in docs:
        chunks = list(iter_chunks(f"{name}.md", body.splitlines(), kind="markdown", title=name))
        items = [{"text": c.text, "title": c.title, "path": c.path} for c in chunks]
        chunked.append((name, items, _vectors(items, cache), {c.line_start: j for j, c in enumerate(chunks)}))
    out = []
    for d, (name, items, vectors, by_line) in enumerate(chunked):
        positives = {p.group: p.question for p in doc_pairs(name, docs[d][1], seed=seed, limit=60) if p.label}
        for gid in rng.sample(sorted(positives), min(per_doc, len(positives))):
            own = by_line[int(gid.split("/")[2])]
            question = positives[gid]
            q_vec = cache.query(question)
            chosen = [own, *_nearest(q_vec, vectors, [j for j in range(len(items)) if j != own], CANDIDATES - 1)]
            out.append(group("docs", gid, question, [items[j] for j in chosen], [j == own for j in chosen]))
            if len(chunked) > 1 and rng.random() < UNANSWERABLE_SHARE:
                other_name, other, other_vecs, _ = chunked[(d + 1 + rng.randrange(len(chunked) - 1)) % len(chunked)]
                picks = _nearest(q_vec, other_vecs, range(len(other)), CANDIDATES)
                out.append(group("docs", f"{gid}/cross/{other_name}", question, [other[j] for j in picks],
                                 [False] * len(picks)))
    return out


class CachedScorer:
    """The answer scorer behind an on-disk cache of its probabilities (a fit re-reads them in seconds)."""

    def __init__(self, scorer: Any, path: Path) -> None:
        self.scorer = scorer
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path))
        self.db.execute("CREATE TABLE IF NOT EXISTS p (k TEXT PRIMARY KEY, v REAL)")

    @staticmethod
    def key(question: str, text: str) -> str:
        return hashlib.sha1(f"{question}\x00{text}".encode()).hexdigest()

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        keys = [self.key(q, t) for q, t in pairs]
        known: dict[str, float] = {}
        for s in range(0, len(keys), 500):
            chunk = keys[s:s + 500]
            rows = self.db.execute(f"SELECT k, v FROM p WHERE k IN ({','.join('?' * len(chunk))})", chunk)
            known.update(dict(rows.fetchall()))
        missing = [i for i, k in enumerate(keys) if k not in known]
        if missing:
            new = self.scorer.predict([pairs[i] for i in missing])
            rows = [(keys[i], float(v)) for i, v in zip(missing, new, strict=True)]
            self.db.executemany("INSERT OR REPLACE INTO p VALUES (?, ?)", rows)
            self.db.commit()
            known.update(dict(rows))
        return np.asarray([known[k] for k in keys], dtype=np.float32)
