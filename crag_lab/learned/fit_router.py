"""Fit a LoRA-tuned router on a messages file: the training loop and the validation, and nothing of crag_lab.

It imports only torch, transformers, peft and the standard library, so it runs as a plain script on
a machine that has those and not crag_lab's other dependencies (a GPU machine, say):

    python crag_lab/learned/fit_router.py --messages messages.json.gz --base MODEL_DIR --out DIR

``python -m crag_lab.learned.train_router --dump messages.json.gz`` writes the messages file:
``{"classes": [...], "train": [[text, class_index], ...], "val": [[text, class_index], ...]}``. The
model is the MiniLM encoder with a LoRA adapter and a classification head over the classes, read from
the message's own tokens (not from a frozen, mean-pooled sentence vector). Seeded and resumable like
``fit.py``; on CUDA the forward pass runs in bfloat16 autocast.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    from crag_lab.learned.fit import TARGETS, adapted, adapter, amp, load_base, run_steps
except ImportError:  # run as a plain script (python crag_lab/learned/fit_router.py) where crag_lab is not installed
    from fit import TARGETS, adapted, adapter, amp, load_base, run_steps  # type: ignore[no-redef]


def read_messages(path: str | Path) -> tuple[list[str], list[tuple[str, int]], list[tuple[str, int]]]:
    """The classes and the (text, class index) rows to train and validate on."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    return list(raw["classes"]), [(t, int(c)) for t, c in raw["train"]], [(t, int(c)) for t, c in raw["val"]]


def probabilities(model: Any, tokenizer: Any, texts: Sequence[str], *, device: str = "cpu", batch: int = 256,
                  max_length: int = 64) -> list[list[float]]:
    """Each text's class probabilities."""
    import torch

    out: list[list[float]] = []
    model.eval()
    with torch.inference_mode(), amp(device):
        for start in range(0, len(texts), batch):
            enc = tokenizer(list(texts[start:start + batch]), truncation=True, max_length=max_length, padding=True,
                            return_tensors="pt").to(device)
            out += torch.softmax(model(**enc).logits.float(), dim=-1).cpu().tolist()
    return out


def fit(train: Sequence[tuple[str, int]], classes: Sequence[str], *, base: str | Path, out: str | Path,
        work: str | Path, seed: int = 13, rank: int = 8, targets: str = "qkv", lr: float = 5e-4, batch: int = 64,
        epochs: float = 1.0, max_length: int = 64, warmup: int = 100, checkpoint_every: int = 200,
        device: str = "cpu", log_every: int = 50, init: str | Path | None = None) -> dict[str, Any]:
    """Train the adapter and head on ``train`` and save them to ``out``; what was done, as a dict. With ``init``
    (a reader's folder) the adapter and head continue from that reader's."""
    import torch
    from peft import LoraConfig

    torch.manual_seed(seed)
    work, out = Path(work), Path(out)
    work.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_base(base, num_labels=len(classes))
    model = adapted(model, work, init, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.1,
                                                  target_modules=TARGETS[targets],
                                                  modules_to_save=["classifier", "pooler"], task_type="SEQ_CLS"))
    model.to(device)
    autocast = amp(device)

    def step_loss(idx: Sequence[int]) -> Any:
        enc = tokenizer([train[i][0] for i in idx], truncation=True, max_length=max_length, padding=True,
                        return_tensors="pt").to(device)
        target = torch.tensor([train[i][1] for i in idx], device=device)
        with autocast:
            logits = model(**enc).logits
        return torch.nn.functional.cross_entropy(logits.float(), target)

    steps, started = run_steps(model, len(train), step_loss, work=work, seed=seed, lr=lr, batch=batch, epochs=epochs,
                               warmup=warmup, checkpoint_every=checkpoint_every, device=device, log_every=log_every)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(str(out))
    return {"seed": seed, "rank": rank, "targets": targets, "lr": lr, "batch": batch, "epochs": epochs,
            "steps": steps, "max_length": max_length, "device": device, "classes": list(classes),
            "init": str(init) if init is not None else None, "minutes": round((time.time() - started) / 60, 1)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fit_router.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", required=True, help="a messages file (python -m crag_lab.learned.train_router --dump)")
    parser.add_argument("--base", required=True, help="the MiniLM folder (config, weights, tokenizer)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default=".cache/router-fit", help="checkpoints; rerun to resume")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--targets", choices=sorted(TARGETS), default="qkv")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--checkpoint-every", type=int, default=200)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--init", help="a token reader's folder to continue training from (default: a fresh adapter)")
    args = parser.parse_args(argv)
    classes, train, val = read_messages(args.messages)
    print(f"{len(train)} training and {len(val)} validation messages, classes {classes}", flush=True)
    done = fit(train, classes, base=args.base, out=args.out, work=args.work, seed=args.seed, rank=args.rank,
               targets=args.targets, lr=args.lr, batch=args.batch, epochs=args.epochs, max_length=args.max_length,
               warmup=args.warmup, checkpoint_every=args.checkpoint_every, device=args.device, init=args.init)
    if val:
        model, tokenizer = load_base(args.base, num_labels=len(classes))
        model = adapter(model, args.out).to(args.device)
        probs = probabilities(model, tokenizer, [t for t, _ in val], device=args.device, max_length=args.max_length)
        hits = [max(range(len(classes)), key=p.__getitem__) == c for p, (_, c) in zip(probs, val, strict=True)]
        done["validation_accuracy"] = round(sum(hits) / len(hits), 4)
        done["validation_recall"] = {name: round(sum(h for h, (_, c) in zip(hits, val, strict=True) if c == k)
                                                 / max(1, sum(1 for _, c in val if c == k)), 4)
                                     for k, name in enumerate(classes)}
    (Path(args.out) / "fit.json").write_text(json.dumps(done, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
