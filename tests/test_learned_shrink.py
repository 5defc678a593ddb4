"""Storing a LoRA adapter at a lower rank (crag_lab/learned/shrink.py): the best approximation, the same scale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from crag_lab.learned.shrink import main, shrink

KEY = "base_model.model.layer.query.lora_{}.weight"


def adapter(folder: Path, rank: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    a, b = torch.randn(rank, 12), torch.randn(10, rank)
    folder.mkdir()
    save_file({KEY.format("A"): a, KEY.format("B"): b, "base_model.model.qa_outputs.weight": torch.ones(2, 12)},
              str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "lora_alpha": 2 * rank}), encoding="utf-8")
    (folder / "spans.json").write_text("{}", encoding="utf-8")
    return a, b


def test_the_update_becomes_its_best_lower_rank_approximation_at_the_same_scale(tmp_path: Path) -> None:
    a, b = adapter(tmp_path / "r4")
    kept = shrink(tmp_path / "r4", tmp_path / "r2", 2)
    state = load_file(str(tmp_path / "r2" / "adapter_model.safetensors"))
    new_a, new_b = state[KEY.format("A")], state[KEY.format("B")]
    assert new_a.shape == (2, 12) and new_b.shape == (10, 2) and new_a.dtype == torch.float16
    u, s, vh = torch.linalg.svd(b @ a, full_matrices=False)
    best = (u[:, :2] * s[:2]) @ vh[:2]
    assert torch.allclose(new_b.float() @ new_a.float(), best, atol=2e-2 * float(s[0]))
    assert kept["least_energy_kept"] == pytest.approx(float((s[:2] ** 2).sum() / (s ** 2).sum()), rel=1e-4)
    config = json.loads((tmp_path / "r2" / "adapter_config.json").read_text(encoding="utf-8"))
    assert config["r"] == 2 and config["lora_alpha"] / config["r"] == 2.0  # the scale is kept
    assert (tmp_path / "r2" / "spans.json").is_file()  # the card travels with it
    assert torch.equal(state["base_model.model.qa_outputs.weight"], torch.ones(2, 12).half())


def test_a_rank_that_is_not_lower_is_one_clear_line(tmp_path: Path) -> None:
    adapter(tmp_path / "r4")
    with pytest.raises(SystemExit, match=r"--rank 4 must be below the adapter's rank 4"):
        main([str(tmp_path / "r4"), "--rank", "4", "--out", str(tmp_path / "o")])
