"""Knowledge bases whose vectors live in Qdrant (crag_lab/kb/_backends.py), against the FAISS default.

Qdrant runs embedded (``qdrant-client``'s local mode, in the test's folder): the same code talks to a
server when ``qdrant_url`` is set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_client  # in the dev extra: a missing client fails these tests, it does not skip them

from crag_lab import CragConfig, KnowledgeBase, Lab
from crag_lab.config import VectorStoreConfig
from crag_lab.kb import IndexCorruptError
from crag_lab.parsing import strip_stats_blocks
from crag_lab.tools.kb_tools import kb_tools

FILES = {
    "gateway.md": "# API gateway\n\nThe api-gateway accepts public TLS traffic on port 8443.\n\n"
                  "## Limits\n\nOne API key may make 600 requests per minute.\n",
    "ledger.md": "# Ledger service\n\nThe ledger service is owned by the Payments team.\n\n"
                 "Internal reads go to port 8081.\n",
    "oncall.md": "# On-call\n\nThe Payments team is led by Dana Okafor.\n\nPages escalate after 15 minutes.\n",
}
QUERIES = ["Which port takes public TLS traffic?", "who leads payments", "rate limit per API key",
           "when do pages escalate", "internal ledger reads"]
QDRANT = VectorStoreConfig(vector_store="qdrant")


def search(kb: KnowledgeBase, query: str) -> list[dict[str, Any]]:
    tools = {t.name: t for t in kb_tools(kb, top_k=4)}
    return json.loads(tools["vector_search"]({"query": query}))


def manifest(kb: KnowledgeBase) -> dict[str, Any]:
    live = (kb.cache_dir / "CURRENT").read_text(encoding="utf-8").strip()
    return dict(json.loads((kb.cache_dir / live / "manifest.json").read_text(encoding="utf-8")))


def collections(kb: KnowledgeBase) -> list[str]:
    client = kb._backend.client  # type: ignore[union-attr]
    return sorted(c.name for c in client.get_collections().collections)


def test_qdrant_search_returns_the_faiss_hits_with_the_same_cosine_scores(
        make_kb: Callable[..., Path], embed_model: Any) -> None:
    root = make_kb(FILES)
    faiss_kb = KnowledgeBase.build(root, embed_model=embed_model, cache_dir=root.parent / "faiss-index")
    qdrant_kb = KnowledgeBase.build(root, embed_model=embed_model, vector_store=QDRANT)
    assert manifest(qdrant_kb)["vector_store"]["kind"] == "qdrant" and "vector_store" not in manifest(faiss_kb)
    assert isinstance(qdrant_kb.index.vector_store.client, qdrant_client.QdrantClient)  # type: ignore[attr-defined]
    for query in QUERIES:
        faiss_hits, qdrant_hits = search(faiss_kb, query), search(qdrant_kb, query)
        assert [(h["path"], h["line"], h["line_end"], h["text"]) for h in qdrant_hits] == \
               [(h["path"], h["line"], h["line_end"], h["text"]) for h in faiss_hits]
        assert [h["score"] for h in qdrant_hits] == pytest.approx([h["score"] for h in faiss_hits], abs=1e-4)
        raw_f = [n.score for n in faiss_kb.vector_retriever(4).retrieve(query)]
        raw_q = [n.score for n in qdrant_kb.vector_retriever(4).retrieve(query)]
        assert raw_q == pytest.approx(raw_f, abs=1e-5)  # cosine in both
    keys_f, vectors_f = faiss_kb.passage_vectors()
    keys_q, vectors_q = qdrant_kb.passage_vectors()
    assert keys_q == keys_f and np.allclose(vectors_q, vectors_f, atol=1e-6)


def test_a_qdrant_rebuild_embeds_only_the_changed_file_and_drops_the_old_collection(
        make_kb: Callable[..., Path], embed_model: Any) -> None:
    root = make_kb(FILES)
    first = KnowledgeBase.build(root, embed_model=embed_model, vector_store=QDRANT)
    before = dict(zip([c.id for c in first.chunks], first.passage_vectors()[1], strict=True))
    (root / "oncall.md").write_text("# On-call\n\nThe Payments team is led by Ravi Menon.\n", encoding="utf-8")
    second = KnowledgeBase.build(root, embed_model=embed_model, vector_store=QDRANT)
    report = second.build_report
    assert report is not None and report["full_rebuild_reason"] is None
    changed = [c for c in second.chunks if c.path == "oncall.md"]
    assert (report["files_changed"], report["chunks_embedded"]) == (1, len(changed))
    assert report["chunks_reused"] == len(second.chunks) - len(changed)
    after = dict(zip([c.id for c in second.chunks], second.passage_vectors()[1], strict=True))
    for chunk in second.chunks:
        if chunk.path != "oncall.md":
            assert np.allclose(after[chunk.id], before[chunk.id], atol=1e-6)  # reused, not re-embedded
    assert search(second, "who leads the payments team")[0]["text"].endswith("Ravi Menon.")
    assert collections(second) == [second._backend.collection]  # type: ignore[union-attr]


def test_a_qdrant_index_reloads_and_a_lost_collection_is_reported_and_repaired(
        make_kb: Callable[..., Path], embed_model: Any) -> None:
    root = make_kb(FILES)
    built = KnowledgeBase.build(root, embed_model=embed_model, vector_store=QDRANT)
    loaded = KnowledgeBase.load(root, embed_model=embed_model)  # the manifest says where the vectors are
    assert [c.id for c in loaded.chunks] == [c.id for c in built.chunks]
    hits = search(built, QUERIES[0])
    assert search(loaded, QUERIES[0]) == hits
    built._backend.client.delete_collection(built._backend.collection)  # type: ignore[union-attr]
    with pytest.raises(IndexCorruptError, match="Qdrant collection"):
        KnowledgeBase.load(root, embed_model=embed_model)
    repaired = KnowledgeBase.build(root, embed_model=embed_model, vector_store=QDRANT)
    assert repaired.build_report is not None and repaired.build_report["chunks_embedded"] == len(repaired.chunks)
    assert search(repaired, QUERIES[0]) == hits


def test_moving_an_index_between_faiss_and_qdrant_embeds_nothing(make_kb: Callable[..., Path], embed_model: Any) -> None:
    root = make_kb(FILES)
    faiss_kb = KnowledgeBase.build(root, embed_model=embed_model)
    expected = [h["path"] for h in search(faiss_kb, QUERIES[1])]
    moved = KnowledgeBase.build(root, embed_model=embed_model, vector_store=QDRANT)
    assert moved.build_report is not None and moved.build_report["chunks_embedded"] == 0
    assert [h["path"] for h in search(moved, QUERIES[1])] == expected
    back = KnowledgeBase.build(root, embed_model=embed_model, vector_store=VectorStoreConfig(vector_store="faiss"))
    assert back.build_report is not None and back.build_report["chunks_embedded"] == 0
    assert [h["path"] for h in search(back, QUERIES[1])] == expected
    assert "vector_store" not in manifest(back)
    assert collections(moved) == []  # back on FAISS: no collection of this knowledge base is left


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if k not in ("latency_ms", "node_ms")}
    out["answer"] = strip_stats_blocks(str(out["answer"]))
    out["usage"] = [{k: v for k, v in u.items() if k != "latency_ms"} for u in out["usage"]]
    return out


def test_a_lab_on_qdrant_records_what_a_lab_on_faiss_records(make_kb: Callable[..., Path]) -> None:
    root = make_kb(FILES)
    questions = ["On which port does the api-gateway accept public TLS traffic?",
                 "Who leads the team that owns the ledger service?", "hello!"]
    on_faiss = Lab.from_directory(root, config=CragConfig(), remote=False,
                                  cache_dir=root.parent / "faiss-index").run(questions)
    lab = Lab.from_directory(root, config=CragConfig(), remote=False, vector_store=QDRANT)
    assert lab.recipe is not None and lab.recipe.vector_store == QDRANT  # Ray workers rebuild it on Qdrant too
    on_qdrant = lab.run(questions)
    assert [comparable(r) for r in on_qdrant.records] == [comparable(r) for r in on_faiss.records]
    assert on_qdrant.replay(relevance_floor=0.5).route_counts() == on_faiss.replay(relevance_floor=0.5).route_counts()
