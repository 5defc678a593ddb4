"""The GPU transfer copy of the base model (crag_lab/learned/base_copy.py) and fit.load_base reading it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from crag_lab.learned.base_copy import PACKED, main, texts_of, write_copy
from crag_lab.learned.fit import load_base, write_pairs


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer BERT with MiniLM's tokenizer and vocabulary (so the copy's row rule meets a real tokenizer)."""
    from transformers import BertConfig, BertModel

    from crag_lab.embeddings import model_dir
    from crag_lab.learned.base_copy import TOKENIZER_FILES

    folder = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16)).save_pretrained(str(folder))
    for name in TOKENIZER_FILES[1:]:
        (folder / name).write_bytes((Path(model_dir()) / name).read_bytes())
    return folder


def test_the_copy_keeps_the_rows_its_texts_use_and_zeroes_the_rest(tiny_model: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    kept = write_copy(tiny_model, tmp_path / "copy", ["What is the port of gateway?", "hello there"])
    assert (tmp_path / "copy" / PACKED).is_file() and not (tmp_path / "copy" / "model.safetensors").exists()
    model, tokenizer = load_base(tmp_path / "copy")  # unpacks on first use
    assert type(model).__name__ == "BertForSequenceClassification"
    write_copy(tiny_model, tmp_path / "spans-copy", ["What is the port of gateway?"])
    from crag_lab.learned import fit_spans

    assert type(fit_spans.load_base(tmp_path / "spans-copy")[0]).__name__ == "BertForQuestionAnswering"  # unpacks too
    original = load_file(str(tiny_model / "model.safetensors"))
    copied = load_file(str(tmp_path / "copy" / "model.safetensors"))
    key = next(k for k in original if k.endswith("word_embeddings.weight"))
    used = set(AutoTokenizer.from_pretrained(str(tiny_model))("What is the port of gateway? hello there")["input_ids"])
    assert kept == {"rows_kept": len(used | set(tokenizer.all_special_ids)), "rows": 30522}
    for row in used:
        assert torch.equal(copied[key][row], original[key][row].half())
    unused = next(r for r in range(1000, 30522) if r not in used)
    assert copied[key][unused].abs().sum() == 0 and original[key][unused].abs().sum() > 0
    other = next(k for k in original if k != key)
    assert torch.equal(copied[other], original[other].half())


def test_texts_come_from_pairs_and_messages_files_and_anything_else_is_one_clear_line(tmp_path: Path) -> None:
    write_pairs(tmp_path / "p.json.gz", [("Q one?", "a text", 1), ("Q one?", "another", 0)])
    with gzip.open(tmp_path / "m.json.gz", "wt", encoding="utf-8") as f:
        json.dump({"classes": ["a"], "train": [["hi", 0]], "val": [["bye", 0]]}, f)
    with gzip.open(tmp_path / "x.json.gz", "wt", encoding="utf-8") as f:
        json.dump({"rows": []}, f)
    assert texts_of(tmp_path / "p.json.gz") == ["Q one?", "a text", "another"]
    assert texts_of(tmp_path / "m.json.gz") == ["hi", "bye"]
    from crag_lab.learned.span_data import SpanExample, write_examples

    write_examples(tmp_path / "s.json.gz", [SpanExample("Which port?", "Gate: port 8443", 11, "8443", "squad11")])
    assert texts_of(tmp_path / "s.json.gz") == ["Gate: port 8443", "Which port?"]
    with pytest.raises(SystemExit, match="neither a pairs file"):
        texts_of(tmp_path / "x.json.gz")
    with pytest.raises(SystemExit, match="is not a file"):
        main(["--texts", str(tmp_path / "missing.json.gz"), "--out", str(tmp_path / "o")])
