"""Index builds whose chunks are embedded by a Ray Data stage (crag_lab/ray_index.py): the local index, byte for byte.

One Ray Data build (two workers on conftest's local Ray, shared with tests/test_ray_executor.py) is
compared with a local build of the same folder; the batch size is cut to 4 so that a tiny knowledge
base still makes several batches, spread over both workers and put back in order. The other tests
need no cluster: they check what the driver sends, the errors, and the CLI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import write_tree

from crag_lab.embeddings import default_embed_model
from crag_lab.errors import RayUnavailableError
from crag_lab.kb import KnowledgeBase
from crag_lab.kb._embedding import DEFAULT_MODEL_ID, UnitEmbedding, embed_batch, embed_texts
from crag_lab.ray_index import RayDataEmbedder, resolve_embedder, threads_if_this_machine

BATCH = 4
KB = {
    "gateway.md": "# API gateway\n\nThe api-gateway accepts public TLS traffic on port 8443.\n\n"
                  "## Limits\n\nOne API key may make 600 requests per minute; bursts of 50 are allowed for ten "
                  "seconds, after which the gateway answers 429 with a Retry-After header.\n\n"
                  "## Certificates\n\nCertificates are rotated every 60 days by the platform team.\n",
    "ledger.md": "# Ledger service\n\nThe ledger service is owned by the Payments team.\n\n"
                 "## Ports\n\nInternal reads go to port 8081.\n\n"
                 "## Backups\n\nThe ledger database is backed up every night at 02:00 UTC and the backups are kept "
                 "for 35 days in two regions; a restore drill runs on the first Monday of every quarter.\n",
    "oncall.md": "# On-call\n\nThe Payments team is led by Dana Okafor.\n\n"
                 "## Escalation\n\nPages escalate after 15 minutes.\n\n## Handover\n\nHandover is on Mondays.\n",
}


def model() -> UnitEmbedding:
    """The bundled MiniLM (one copy per process), cutting batches of 4 texts."""
    return UnitEmbedding(default_embed_model, model_name=DEFAULT_MODEL_ID, embed_batch_size=BATCH)


def index_files(kb: KnowledgeBase) -> dict[str, bytes]:
    """Every file of the live index folder (manifest, docstore, FAISS vectors), by name; the index
    store's random id (LlamaIndex draws one per index) made ``ID``."""
    folder = kb.cache_dir / (kb.cache_dir / "CURRENT").read_text(encoding="utf-8").strip()
    files = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    files["index_store.json"] = re.sub(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", b"ID",
                                       files["index_store.json"])
    return files


def same_index(a: KnowledgeBase, b: KnowledgeBase) -> None:
    assert [c.id for c in a.chunks] == [c.id for c in b.chunks]
    assert a.passage_vectors()[1].tobytes() == b.passage_vectors()[1].tobytes()
    assert index_files(a) == index_files(b)  # manifest, docstore and the FAISS file, byte for byte


@pytest.fixture(scope="module")
def kb_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tree(tmp_path_factory.mktemp("rayindex") / "kb", KB)


@pytest.fixture(scope="module")
def local(kb_root: Path, one_thread: None) -> KnowledgeBase:
    return KnowledgeBase.build(kb_root, cache_dir=kb_root.parent / "local", embed_model=model())


def test_a_ray_data_build_writes_the_local_index_byte_for_byte(
        kb_root: Path, local: KnowledgeBase, ray_cluster: None) -> None:
    embedder = RayDataEmbedder(workers=2)
    on_ray = KnowledgeBase.build(kb_root, cache_dir=kb_root.parent / "ray", embed_model=model(), embed_with=embedder)
    chunks = len(local.chunks)
    run = dict(embedder.last_run)
    assert run.pop("worker_embed_s") > 0
    assert run == {"batches": -(-chunks // BATCH), "workers": 2, "texts": chunks} and run["batches"] >= 3
    assert on_ray.build_report is not None and on_ray.build_report["chunks_embedded"] == chunks
    same_index(on_ray, local)
    # The batches matter: the same texts in one batch come out different in the last digits.
    texts, vectors = local.passage_vectors()
    one_batch = UnitEmbedding(default_embed_model, model_name=DEFAULT_MODEL_ID, embed_batch_size=64)
    assert embed_texts(one_batch, texts).tobytes() != vectors.tobytes()

    again = KnowledgeBase.build(kb_root, cache_dir=kb_root.parent / "ray", embed_model=model(),
                                embed_with=(idle := RayDataEmbedder(workers=2)))
    assert again.build_report is not None and again.build_report["chunks_embedded"] == 0
    assert idle.last_run == {}  # nothing changed: no Ray Data stage ran


def test_workers_on_this_machine_use_the_drivers_threads_where_they_fit_and_a_wider_cluster_its_own(
        ray_cluster: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    import torch

    threads, cores = torch.get_num_threads(), os.cpu_count() or 1
    assert threads_if_this_machine(1) == threads  # a thread count moves MiniLM's last digits
    assert threads_if_this_machine(cores // threads) == threads  # as many workers as fit the cores
    assert threads_if_this_machine(cores // threads + 1) is None  # one more would oversubscribe them: Ray's one thread
    nodes = ray.nodes()
    monkeypatch.setattr(ray, "nodes", lambda: [*nodes, {"NodeID": "another-machine", "Alive": True}])
    assert threads_if_this_machine(1) is None


class StageHere(RayDataEmbedder):
    """`RayDataEmbedder` with its Ray Data stage run in this process: what the driver cuts, sends and puts back."""

    def __init__(self) -> None:
        super().__init__(workers=2)
        self.sent: list[list[str]] = []

    def embed_batches(self, embed: UnitEmbedding, batches: Sequence[list[str]]) -> list[np.ndarray]:
        self.sent += [list(b) for b in batches]
        return [embed_batch(embed, list(b)) for b in batches]


def test_an_incremental_ray_build_embeds_only_changed_files_and_reuses_the_other_vectors(
        kb_root: Path, local: KnowledgeBase, tmp_path: Path) -> None:
    root = tmp_path / "kb"
    shutil.copytree(kb_root, root)
    for name in ("local", "ray"):  # two copies of the same built index
        shutil.copytree(local.cache_dir, tmp_path / name)
    (root / "ledger.md").write_text(KB["ledger.md"] + "\n## Owners\n\nAsk #payments-ledger for access.\n",
                                    encoding="utf-8")
    (root / "new.md").write_text("# New\n\nThe new service listens on port 9090.\n", encoding="utf-8")
    here = KnowledgeBase.build(root, cache_dir=tmp_path / "local", embed_model=model())
    stage = StageHere()
    there = KnowledgeBase.build(root, cache_dir=tmp_path / "ray", embed_model=model(), embed_with=stage)
    assert here.build_report is not None and there.build_report is not None
    changed = [c for c in there.chunks if c.path in ("ledger.md", "new.md")]
    assert sorted(t for b in stage.sent for t in b) == sorted(
        t for t, c in zip(there.passage_vectors()[0], there.chunks, strict=True) if c in changed)
    assert all(len(b) <= BATCH for b in stage.sent) and len(stage.sent) >= 2
    assert there.build_report["chunks_embedded"] == len(changed) == here.build_report["chunks_embedded"]
    assert there.build_report["chunks_reused"] == len(there.chunks) - len(changed) > 0
    same_index(there, here)


def test_without_ray_a_ray_build_says_how_to_install_it_and_keeps_the_index(
        kb_root: Path, local: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "index"
    shutil.copytree(local.cache_dir, cache)
    root = tmp_path / "kb"
    shutil.copytree(kb_root, root)
    (root / "new.md").write_text("# New\n\nPort 9090.\n", encoding="utf-8")
    before = (cache / "CURRENT").read_text(encoding="utf-8")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where it is not installed
    with pytest.raises(ImportError, match=r"embed_with='ray' needs Ray: pip install 'crag-lab\[scale\]'"):
        KnowledgeBase.build(root, cache_dir=cache, embed_model=model(), embed_with="ray")
    assert (cache / "CURRENT").read_text(encoding="utf-8") == before
    assert KnowledgeBase.load(kb_root, cache_dir=cache, embed_model=model()).files == sorted(KB)


class NoCluster:
    """Stands in for the ``ray`` module where no cluster answers at the address given."""

    def is_initialized(self) -> bool:
        return False

    def init(self, address: str | None = None, **kwargs: Any) -> None:
        raise ConnectionError(f"could not connect to {address}")


def test_an_unreachable_cluster_is_named_in_the_error(
        kb_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", NoCluster())
    with pytest.raises(RayUnavailableError, match=r"no Ray cluster answers at 'ray://head:10001'.*ray start --head"):
        KnowledgeBase.build(kb_root, cache_dir=tmp_path / "index", embed_model=model(), embed_with="ray://head:10001")
    assert not (tmp_path / "index" / "CURRENT").exists()


def test_embed_with_names_are_checked() -> None:
    for spec, address in (("auto", "auto"), ("ray", None), ("10.0.0.5:6379", "10.0.0.5:6379")):
        embedder = resolve_embedder(spec)
        assert isinstance(embedder, RayDataEmbedder) and embedder.address == address
    stage = StageHere()
    assert resolve_embedder(stage) is stage
    with pytest.raises(ValueError, match=r"unknown embed_with 'threads'; use 'local', 'ray', a Ray address"):
        KnowledgeBase.build("unused", embed_with="threads")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        RayDataEmbedder(workers=0)


@pytest.mark.parametrize(("flags", "address", "workers"), [
    ([], None, None), (["--ray"], "ray", None), (["--ray", "ray://head:10001", "--workers", "4"], "ray://head:10001", 4),
])
def test_crag_lab_index_ray_hands_a_ray_data_embedder_to_the_build(
        flags: list[str], address: str | None, workers: int | None, kb_root: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from crag_lab.cli import main

    seen: dict[str, Any] = {}

    def fake_build(cls: Any, root: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return SimpleNamespace(build_report={"chunks_embedded": 0})

    monkeypatch.setattr(KnowledgeBase, "build", classmethod(fake_build))
    assert main(["index", str(kb_root), *flags]) == 0
    embed_with = seen["embed_with"]
    if address is None:
        assert embed_with == "local" and "ray_data" not in json.loads(capsys.readouterr().out)
    else:
        assert isinstance(embed_with, RayDataEmbedder) and embed_with.workers == workers
        assert embed_with.address == (None if address == "ray" else address)
        assert json.loads(capsys.readouterr().out)["ray_data"] is None  # the fake build embedded nothing


def test_crag_lab_index_refuses_an_address_that_is_not_one(kb_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crag_lab.cli import main

    assert main(["index", str(kb_root), "--ray", "http://head"]) == 2
    assert "unknown embed_with 'http://head'" in capsys.readouterr().err
