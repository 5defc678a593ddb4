"""The offline model's vector cache: history-independent groups, a store shared across sessions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from crag_lab import Lab
from crag_lab.offline import OfflineModel
from crag_lab.offline.reading import read
from crag_lab.offline.vectors import STORE_FILE, GroupStore, VectorCache
from crag_lab.parsing import strip_stats_blocks

ITEMS = [
    {"n": 1, "title": "Gateway", "path": "gw.md",
     "text": "The gateway accepts public TLS traffic on port 8443. Internal callers use port 8080."},
    {"n": 2, "title": "Payments", "path": "pay.md",
     "text": "- Owning team: Payments\n- Lead: Tiago Mendes\n- Channel: #team-payments"},
]


def _cosines(query: str, cache: VectorCache) -> list[float]:
    reading = read(query, ITEMS, cache)
    return [item.cos for item in reading.items] + [u.cos for item in reading.items for u in item.units]


def test_a_reading_does_not_depend_on_what_was_read_before(embed_model: BaseEmbedding) -> None:
    cold = _cosines("Which port takes public TLS traffic?", VectorCache(embed_model))
    warm_cache = VectorCache(embed_model)
    # Other questions and other evidence first: MiniLM's floats depend on a batch's other texts,
    # so a vector must come from its own group, never from a batch shaped by earlier misses.
    read("Who leads payments?", [*ITEMS[1:], {"n": 3, "text": "Unrelated text about release trains."}], warm_cache)
    read("Which port takes public TLS traffic?", ITEMS[:1], warm_cache)
    assert _cosines("Which port takes public TLS traffic?", warm_cache) == cold


def test_a_second_session_reads_the_store_instead_of_encoding(embed_model: BaseEmbedding, tmp_path: Path) -> None:
    first = VectorCache(embed_model, store=tmp_path / STORE_FILE, model_name="minilm")
    expected = _cosines("Who leads the payments team?", first)
    assert first.encoded > 0 and first.read_from_store == 0

    second = VectorCache(embed_model, store=tmp_path / STORE_FILE, model_name="minilm")
    assert _cosines("Who leads the payments team?", second) == expected
    assert second.encoded == 0 and second.read_from_store == first.encoded

    other_model = VectorCache(embed_model, store=tmp_path / STORE_FILE, model_name="another-model")
    _cosines("Who leads the payments team?", other_model)
    assert other_model.encoded == first.encoded  # the store is keyed by the embedding model too


def test_an_unusable_store_warns_and_the_cache_still_answers(embed_model: BaseEmbedding, tmp_path: Path) -> None:
    folder = tmp_path / "a-folder-not-a-file"
    folder.mkdir()
    with pytest.warns(RuntimeWarning, match="kept in memory only"):
        store = GroupStore(folder)
    cache = VectorCache(embed_model, store=store)
    assert _cosines("Which port?", cache) == _cosines("Which port?", VectorCache(embed_model))
    assert len(store) == 0


def test_prepare_encodes_every_chunk_once_and_answers_do_not_change(
    embed_model: BaseEmbedding, make_kb: Callable[..., Path]
) -> None:
    files = {"gw.md": "# Gateway\n\n" + ITEMS[0]["text"] + "\n", "pay.md": "# Payments\n\n" + ITEMS[1]["text"] + "\n"}
    lazy = Lab.from_directory(make_kb(files, "lazy"), remote=False)
    expected = strip_stats_blocks(lazy.ask("Who leads the payments team?").answer)

    lab = Lab.from_directory(make_kb(files, "prepared"), remote=False)
    encoded = lab.prepare()
    assert encoded > 0 and lab.prepare() == 0  # a second prepare finds everything encoded
    assert (lab.kb.cache_dir / STORE_FILE).is_file()
    model = lab.model
    assert isinstance(model, OfflineModel)
    before = model.vectors.encoded
    assert strip_stats_blocks(lab.ask("Who leads the payments team?").answer) == expected
    assert "Tiago Mendes" in expected
    # Only the question (and its parts and planned searches) is new; no chunk sentence is encoded.
    assert model.vectors.encoded - before <= 3

    fresh = Lab.from_directory(lab.kb.root, remote=False)
    assert fresh.prepare() == 0  # the store in the index folder outlives the session


def test_crag_lab_index_prepare_encodes_once_per_index(make_kb: Callable[..., Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from crag_lab.cli import main

    kb = make_kb({"gw.md": "# Gateway\n\n" + ITEMS[0]["text"] + "\n"})
    assert main(["index", str(kb), "--prepare"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["index", str(kb), "--prepare"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["units_encoded"] > 0 and second["units_encoded"] == 0
    assert main(["index", str(kb)]) == 0 and "units_encoded" not in json.loads(capsys.readouterr().out)
