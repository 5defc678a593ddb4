"""Store a LoRA adapter at a lower rank: ``python -m crag_lab.learned.shrink ADAPTER --rank R --out OUT``.

A trained adapter's update to each weight is ``scale × B @ A`` (rank r). Its best rank-R approximation is the
truncated SVD of that product; written as new ``A`` and ``B`` (the singular values split evenly between them),
with ``lora_alpha`` set so the scale stays the same, it loads as any adapter does, in float16. What changes is
the update's smallest singular directions only: the command prints the share of each update's energy (squared
singular values) kept. The doubt reader trained at r = 64 ships at r = 62 this way, to stay under the
project's 5 MiB a file (its data card); anything measured is measured on the stored adapter.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


def shrink(source: str | Path, out: str | Path, rank: int) -> dict[str, float]:
    """Write ``source``'s adapter at ``rank`` to ``out`` (other files copied); the least and mean share of
    energy kept over the adapted weights."""
    import torch
    from safetensors.torch import load_file, save_file

    source, out = Path(source), Path(out)
    config = json.loads((source / CONFIG).read_text(encoding="utf-8"))
    if not 0 < rank < int(config["r"]):
        raise SystemExit(f"shrink: --rank {rank} must be below the adapter's rank {config['r']} and above 0")
    out.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.name not in (WEIGHTS, CONFIG):
            shutil.copyfile(path, out / path.name)
    state = load_file(str(source / WEIGHTS))
    kept: list[float] = []
    new = {}
    for key, value in state.items():
        if "lora_A" in key:
            b = state[key.replace("lora_A", "lora_B")].double()
            u, s, vh = torch.linalg.svd(b @ value.double(), full_matrices=False)
            kept.append(float((s[:rank] ** 2).sum() / (s ** 2).sum()))
            root = s[:rank].sqrt()
            new[key] = (root[:, None] * vh[:rank]).half().contiguous()
            new[key.replace("lora_A", "lora_B")] = (u[:, :rank] * root).half().contiguous()
        elif "lora_B" not in key:
            new[key] = value.half().contiguous()
    save_file(new, str(out / WEIGHTS), metadata={"format": "pt"})
    scale = float(config["lora_alpha"]) / float(config["r"])
    (out / CONFIG).write_text(json.dumps({**config, "r": rank, "lora_alpha": scale * rank}, indent=2) + "\n",
                              encoding="utf-8")
    return {"least_energy_kept": min(kept), "mean_energy_kept": sum(kept) / len(kept)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crag_lab.learned.shrink", description=__doc__.split("\n\n")[0])
    parser.add_argument("adapter", help="a folder with adapter_model.safetensors and adapter_config.json")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    kept = shrink(args.adapter, args.out, args.rank)
    size = (Path(args.out) / WEIGHTS).stat().st_size / 1e6
    print(f"wrote {args.out}: rank {args.rank}, {size:.2f} MB; energy kept: least {kept['least_energy_kept']:.4f}, "
          f"mean {kept['mean_energy_kept']:.4f}")


if __name__ == "__main__":
    main()
