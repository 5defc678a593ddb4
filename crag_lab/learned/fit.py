"""Fit the answer scorer's LoRA adapter on a pairs file: the training loop, and nothing of crag_lab.

It imports only torch, transformers, peft and the standard library, so it runs as a plain script on
a machine that has those and not crag_lab's other dependencies (a GPU machine, say):

    python crag_lab/learned/fit.py --pairs pairs.json.gz --base MODEL_DIR --out ADAPTER_DIR

``python -m crag_lab.learned.train`` writes the pairs file (``--dump-pairs``) and, on CPU, calls
`fit` in-process. Seeded (the batch order and the adapter's initialisation) and resumable: a
checkpoint (adapter, optimiser, schedule, step) goes to ``--work`` every ``--checkpoint-every`` steps
and the same command continues from it. On CUDA the forward pass runs in bfloat16 autocast, so a
GPU run is reproducible in its recipe, not bit for bit.

The pairs file is gzipped JSON with the texts stored once:
``{"questions": [...], "texts": [...], "pairs": [[question_index, text_index, label], ...]}``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TARGETS = {
    "qkv": ["query", "key", "value"],
    "all": ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"],
}
"""Which linear layers of every MiniLM block carry a LoRA adapter."""


def read_pairs(path: str | Path) -> tuple[list[str], list[str], list[int]]:
    """The questions, texts and labels of a pairs file, one entry per pair, in file order."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    questions, texts = raw["questions"], raw["texts"]
    return ([questions[q] for q, _, _ in raw["pairs"]], [texts[t] for _, t, _ in raw["pairs"]],
            [int(label) for _, _, label in raw["pairs"]])


def write_pairs(path: str | Path, pairs: Sequence[tuple[str, str, int]]) -> None:
    """Write ``(question, text, label)`` pairs with every distinct question and text stored once."""
    qi: dict[str, int] = {}
    ti: dict[str, int] = {}
    rows = [[qi.setdefault(q, len(qi)), ti.setdefault(t, len(ti)), int(label)] for q, t, label in pairs]
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump({"questions": list(qi), "texts": list(ti), "pairs": rows}, f, separators=(",", ":"))


def unpack(base: str | Path) -> None:
    """Unpack ``model.safetensors.xz`` in ``base`` (a copy made by ``python -m crag_lab.learned.base_copy`` to fit
    a GPU machine's transfer) when the plain weights file is not there yet."""
    import lzma
    import shutil

    packed, plain = Path(base) / "model.safetensors.xz", Path(base) / "model.safetensors"
    if packed.is_file() and not plain.is_file():
        partial = plain.with_suffix(".partial")
        with lzma.open(packed) as f, open(partial, "wb") as g:
            shutil.copyfileobj(f, g)
        partial.rename(plain)


def load_base(base: str | Path, num_labels: int = 1) -> tuple[Any, Any]:
    """MiniLM from ``base`` as a sequence classifier (float32, a fresh ``num_labels`` head) and its tokenizer."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "some weights were newly initialised": the adapter replaces them
    hf_logging.disable_progress_bar()
    unpack(base)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForSequenceClassification.from_pretrained(str(base), num_labels=num_labels, dtype=torch.float32)
    return model, tokenizer


PEFT_DEPRECATION = r"`is_gradient_checkpointing` is deprecated"
"""What peft 0.21 triggers in transformers 5 on every adapter load (a deprecated call inside ``PeftModel``): nothing a
user of crag_lab can act on, so `adapter` keeps it out of ``crag-lab ask``'s output and the training logs. Any other
warning still shows."""


def adapter(model: Any, folder: str | Path, *, trainable: bool = False) -> Any:
    """``model`` with the LoRA adapter in ``folder`` (`peft`), without peft's deprecation notice (`PEFT_DEPRECATION`):
    every adapter crag_lab loads, to train on or to read with, is loaded here."""
    import warnings

    from peft import PeftModel

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PEFT_DEPRECATION, category=FutureWarning)
        return PeftModel.from_pretrained(model, str(folder), is_trainable=trainable)


def adapted(model: Any, work: Path, init: str | Path | None, fresh: Any) -> Any:
    """``model`` with a trainable adapter: the checkpoint's in ``work`` when a run stopped there, else
    ``init``'s (an adapter folder) when given, else a fresh one from the LoRA config ``fresh``."""
    from peft import get_peft_model

    if (work / "state.pt").exists():
        return adapter(model, work / "adapter", trainable=True)
    if init is not None:
        return adapter(model, init, trainable=True)
    return get_peft_model(model, fresh)


def amp(device: str) -> Any:
    """bfloat16 autocast on CUDA, nothing on CPU."""
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else torch.autocast("cpu", enabled=False)


def run_steps(model: Any, count: int, step_loss: Any, *, work: Path, seed: int, lr: float, batch: int, epochs: float,
              warmup: int, checkpoint_every: int, device: str, log_every: int) -> tuple[int, float]:
    """The training loop both fits share: ``epochs`` seeded passes over ``count`` examples in batches,
    ``step_loss(indices)`` giving each batch's loss, AdamW with warm-up and linear decay, gradients
    clipped at 1, a checkpoint (adapter, optimiser, schedule, step) to ``work`` every ``checkpoint_every``
    steps, resumed from when it is there. Returns the number of steps and when training started."""
    import torch

    state_file = work / "state.pt"
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    rng = random.Random(seed)
    order: list[int] = []
    for _ in range(int(epochs + 0.999)):
        epoch = list(range(count))
        rng.shuffle(epoch)
        order += epoch
    order = order[: int(epochs * count)]
    steps = (len(order) + batch - 1) // batch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, 1 - s / steps))
    step = 0
    if state_file.exists():
        saved = torch.load(state_file, weights_only=False, map_location=device)
        optimiser.load_state_dict(saved["optimiser"])
        schedule.load_state_dict(saved["schedule"])
        step = int(saved["step"])
        torch.set_rng_state(saved["rng"].cpu())
        print(f"resuming at step {step} of {steps}", flush=True)
    model.train()
    started = time.time()
    while step < steps:
        loss = step_loss(order[step * batch:(step + 1) * batch])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad()
        step += 1
        if step % log_every == 0:
            print(f"step {step}/{steps} loss {loss.item():.4f} {(time.time() - started) / 60:.1f} min", flush=True)
        if step % checkpoint_every == 0 or step == steps:
            model.save_pretrained(str(work / "adapter"))
            torch.save({"optimiser": optimiser.state_dict(), "schedule": schedule.state_dict(), "step": step,
                        "rng": torch.get_rng_state()}, state_file)
    return steps, started


def fit(questions: Sequence[str], texts: Sequence[str], labels: Sequence[int], *, base: str | Path,
        out: str | Path, work: str | Path, seed: int = 13, rank: int = 16, targets: str = "qkv",
        lr: float = 5e-4, batch: int = 32, epochs: float = 1.0, max_length: int = 96, warmup: int = 50,
        checkpoint_every: int = 100, device: str = "cpu", log_every: int = 20,
        init: str | Path | None = None) -> dict[str, Any]:
    """Train the adapter and head on the pairs and save them to ``out``; what was done, as a dict.

    With ``init`` (a folder holding an adapter and head, such as the one that ships) training continues
    from it instead of a fresh adapter; ``rank`` and ``targets`` are then the init's own."""
    import torch
    from peft import LoraConfig

    torch.manual_seed(seed)
    work, out = Path(work), Path(out)
    work.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_base(base)
    model = adapted(model, work, init, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.1,
                                                  target_modules=TARGETS[targets],
                                                  modules_to_save=["classifier", "pooler"], task_type="SEQ_CLS"))
    model.to(device)
    autocast = amp(device)

    def step_loss(idx: Sequence[int]) -> Any:
        enc = tokenizer([questions[i] for i in idx], [texts[i] for i in idx], truncation="only_second",
                        max_length=max_length, padding=True, return_tensors="pt").to(device)
        target = torch.tensor([float(labels[i]) for i in idx], device=device)
        with autocast:
            logits = model(**enc).logits.reshape(-1)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), target)

    steps, started = run_steps(model, len(labels), step_loss, work=work, seed=seed, lr=lr, batch=batch, epochs=epochs,
                               warmup=warmup, checkpoint_every=checkpoint_every, device=device, log_every=log_every)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(str(out))
    return {"seed": seed, "rank": rank, "targets": targets, "lr": lr, "batch": batch, "epochs": epochs,
            "steps": steps, "max_length": max_length, "device": device,
            "minutes": round((time.time() - started) / 60, 1), **({"init": str(init)} if init else {})}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fit.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", required=True, help="a pairs file (python -m crag_lab.learned.train --dump-pairs)")
    parser.add_argument("--base", required=True, help="the MiniLM folder (config, weights, tokenizer)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default=".cache/scorer-fit", help="checkpoints; rerun to resume")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--targets", choices=sorted(TARGETS), default="qkv")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--init", help="continue from the adapter and head in this folder")
    args = parser.parse_args(argv)
    questions, texts, labels = read_pairs(args.pairs)
    print(f"{len(labels)} pairs, {sum(labels)} positive", flush=True)
    done = fit(questions, texts, labels, base=args.base, out=args.out, work=args.work, seed=args.seed,
               rank=args.rank, targets=args.targets, lr=args.lr, batch=args.batch, epochs=args.epochs,
               max_length=args.max_length, warmup=args.warmup, checkpoint_every=args.checkpoint_every,
               device=args.device, init=args.init)
    (Path(args.out) / "fit.json").write_text(json.dumps(done, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
