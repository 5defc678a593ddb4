"""Fit the span reader's LoRA adapter and answer head on an examples file: the training loop and the
validation, and nothing of crag_lab.

It imports only torch, transformers, peft and the standard library, so it runs as a plain script on
a machine that has those and not crag_lab's other dependencies (a GPU machine, say):

    python crag_lab/learned/fit_spans.py --examples spans.json.gz --val val.json.gz --base MODEL_DIR --out DIR

``python -m crag_lab.learned.train_spans --dump`` writes the examples files. The model is the MiniLM
encoder with a two-logit head per token (answer start, answer end; `AutoModelForQuestionAnswering`):
a passage longer than ``--max-length`` tokens is read in windows ``--stride`` tokens apart, and an
example whose answer is not inside a window (or that has none) points at the ``[CLS]`` token there.
Seeded and resumable like ``fit.py``: a checkpoint goes to ``--work`` every ``--checkpoint-every``
steps and the same command continues from it. On CUDA the forward pass runs in bfloat16 autocast.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import string
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

try:
    from crag_lab.learned.fit import adapted, adapter, amp, run_steps, unpack
except ImportError:  # run as a plain script (python crag_lab/learned/fit_spans.py) where crag_lab is not installed
    from fit import adapted, adapter, amp, run_steps, unpack  # type: ignore[no-redef]

TARGETS = ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]
"""The linear layers of every MiniLM block that carry a LoRA adapter."""
MAX_ANSWER_TOKENS = 30
"""The longest span the reader may answer with, in tokens."""


def read_examples(path: str | Path) -> list[tuple[str, str, int, str, str]]:
    """``(question, passage, start, answer, source)`` rows of an examples file (``span_data.write_examples``)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    passages = raw["passages"]
    return [(q, passages[p], int(s), a, src) for q, p, s, a, src in raw["examples"]]


def load_base(base: str | Path) -> tuple[Any, Any]:
    """MiniLM from ``base`` with a fresh start/end head (float32) and its tokenizer; a transfer copy
    (``python -m crag_lab.learned.base_copy``) is unpacked on first use."""
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    unpack(base)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForQuestionAnswering.from_pretrained(str(base), dtype=torch.float32)
    return model, tokenizer


def windows(tokenizer: Any, questions: Sequence[str], passages: Sequence[str], *, max_length: int,
            stride: int) -> Any:
    """The tokenised windows of each (question, passage): offsets kept, ``overflow_to_sample_mapping`` says whose."""
    return tokenizer(list(questions), list(passages), truncation="only_second", max_length=max_length, stride=stride,
                     return_overflowing_tokens=True, return_offsets_mapping=True, padding=False)


def targets(enc: Any, rows: Sequence[tuple[str, str, int, str, str]]) -> list[tuple[int, int]]:
    """The answer's first and last token in each window, or (0, 0) (``[CLS]``) when the window lacks it."""
    out = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        _, _, start, answer, _ = rows[enc["overflow_to_sample_mapping"][i]]
        seq = enc.sequence_ids(i)
        ctx = [k for k, s in enumerate(seq) if s == 1]
        end = start + len(answer)
        if start < 0 or not ctx or offsets[ctx[0]][0] > start or offsets[ctx[-1]][1] < end:
            out.append((0, 0))
            continue
        s_tok = next(k for k in ctx if offsets[k][1] > start)
        e_tok = next(k for k in reversed(ctx) if offsets[k][0] < end)
        out.append((s_tok, e_tok))
    return out


def best_spans(start_logits: Any, end_logits: Any, offsets: Sequence[tuple[int, int]], seq: Sequence[int | None],
               top: int = 20) -> tuple[float, list[tuple[float, int, int]]]:
    """The ``[CLS]`` (no answer) score and the best spans ``(score, first char, end char)`` of one window."""
    ctx = [k for k, s in enumerate(seq) if s == 1]
    null = float(start_logits[0] + end_logits[0])
    if not ctx:
        return null, []
    lo, hi = ctx[0], ctx[-1]
    s_order = sorted(range(lo, hi + 1), key=lambda k: -float(start_logits[k]))[:top]
    e_order = sorted(range(lo, hi + 1), key=lambda k: -float(end_logits[k]))[:top]
    spans = [(float(start_logits[s] + end_logits[e]), offsets[s][0], offsets[e][1])
             for s in s_order for e in e_order if s <= e < s + MAX_ANSWER_TOKENS]
    return null, sorted(spans, reverse=True)[:top]


def _normalise(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def f1(prediction: str, answer: str) -> float:
    """SQuAD's token F1 of a predicted answer against one gold answer."""
    p, g = _normalise(prediction).split(), _normalise(answer).split()
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if not p or not g or not common:
        return float(p == g)
    return 2 * common / (len(p) + len(g))


def fit(rows: Sequence[tuple[str, str, int, str, str]], *, base: str | Path, out: str | Path, work: str | Path,
        seed: int = 13, rank: int = 16, lr: float = 1e-3, batch: int = 64, epochs: float = 2.0,
        max_length: int = 256, stride: int = 96, warmup: int = 200, checkpoint_every: int = 500,
        device: str = "cpu", log_every: int = 50, init: str | Path | None = None) -> dict[str, Any]:
    """Train the adapter and head on ``rows`` and save them to ``out``; what was done, as a dict. With ``init``
    (an adapter folder, e.g. the shipped reader's) training continues from it instead of a fresh adapter."""
    import torch
    from peft import LoraConfig

    torch.manual_seed(seed)
    work, out = Path(work), Path(out)
    work.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_base(base)
    model = adapted(model, work, init, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.1, target_modules=TARGETS,
                                                  modules_to_save=["qa_outputs"], task_type="QUESTION_ANS"))
    model.to(device)
    t0 = time.time()
    enc = windows(tokenizer, [r[0] for r in rows], [r[1] for r in rows], max_length=max_length, stride=stride)
    labels = targets(enc, rows)
    print(f"{len(rows)} examples -> {len(labels)} windows ({sum(1 for s, _ in labels if s)} with the answer) "
          f"in {time.time() - t0:.0f} s", flush=True)
    autocast = amp(device)
    keys = ["input_ids", "attention_mask", "token_type_ids"]

    def step_loss(idx: Sequence[int]) -> Any:
        padded = tokenizer.pad({k: [enc[k][i] for i in idx] for k in keys}, return_tensors="pt").to(device)
        start_pos = torch.tensor([labels[i][0] for i in idx], device=device)
        end_pos = torch.tensor([labels[i][1] for i in idx], device=device)
        with autocast:
            result = model(**padded)
        return (torch.nn.functional.cross_entropy(result.start_logits.float(), start_pos)
                + torch.nn.functional.cross_entropy(result.end_logits.float(), end_pos)) / 2

    steps, started = run_steps(model, len(labels), step_loss, work=work, seed=seed, lr=lr, batch=batch, epochs=epochs,
                               warmup=warmup, checkpoint_every=checkpoint_every, device=device, log_every=log_every)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    return {"seed": seed, "rank": rank, "targets": "all", "lr": lr, "batch": batch, "epochs": epochs, "steps": steps,
            "windows": len(labels), "max_length": max_length, "stride": stride, "device": device,
            "init": str(init) if init is not None else None,
            "minutes": round((time.time() - started) / 60, 1)}


def validate(model: Any, tokenizer: Any, rows: Sequence[tuple[str, str, int, str, str]], *, max_length: int,
             stride: int, device: str, batch: int = 128) -> dict[str, Any]:
    """Exact match and F1 of the best span on the answerable rows, and how well the margin (best span
    over ``[CLS]``) separates answerable from unanswerable rows (AUROC), per source and overall."""
    import torch

    enc = windows(tokenizer, [r[0] for r in rows], [r[1] for r in rows], max_length=max_length, stride=stride)
    best: dict[int, tuple[float, str]] = {}
    null: dict[int, float] = {}
    keys = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        for lo in range(0, len(enc["input_ids"]), batch):
            ids = list(range(lo, min(lo + batch, len(enc["input_ids"]))))
            padded = tokenizer.pad({k: [enc[k][i] for i in ids] for k in keys}, return_tensors="pt").to(device)
            result = model(**padded)
            starts, ends = result.start_logits.float().cpu(), result.end_logits.float().cpu()
            for j, i in enumerate(ids):
                row = enc["overflow_to_sample_mapping"][i]
                n, spans = best_spans(starts[j], ends[j], enc["offset_mapping"][i], enc.sequence_ids(i))
                null[row] = min(null.get(row, n), n)
                if spans and spans[0][0] > best.get(row, (float("-inf"), ""))[0]:
                    best[row] = (spans[0][0], rows[row][1][spans[0][1]:spans[0][2]])
    by_source: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    margins: list[tuple[float, int]] = []
    for i, (_, _, start, answer, source) in enumerate(rows):
        margin = best.get(i, (float("-inf"), ""))[0] - null[i]
        margins.append((margin, int(start >= 0)))
        by_source[source]["margin>0"].append(float(margin > 0))
        if start >= 0:
            predicted = best.get(i, (0.0, ""))[1]
            by_source[source]["em"].append(float(_normalise(predicted) == _normalise(answer)))
            by_source[source]["f1"].append(f1(predicted, answer))
    pos = [m for m, y in margins if y]
    neg = [m for m, y in margins if not y]
    auroc = (sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))) if pos and neg else None
    return {"auroc_answerable": auroc, "rows": len(rows),
            **{src: {k: round(sum(v) / len(v), 4) for k, v in m.items()} | {"rows": len(next(iter(m.values())))}
               for src, m in by_source.items()}}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="fit_spans.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", required=True, help="training examples (python -m crag_lab.learned.train_spans)")
    parser.add_argument("--val", help="validation examples, measured after training")
    parser.add_argument("--base", required=True, help="the MiniLM folder (config, weights, tokenizer)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default=".cache/spans-fit", help="checkpoints; rerun to resume")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--stride", type=int, default=96)
    parser.add_argument("--checkpoint-every", type=int, default=500)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--init", help="an adapter folder to continue training from (default: a fresh adapter)")
    args = parser.parse_args(argv)
    rows = read_examples(args.examples)
    print(f"{len(rows)} examples, {sum(1 for r in rows if r[2] >= 0)} answerable", flush=True)
    done = fit(rows, base=args.base, out=args.out, work=args.work, seed=args.seed, rank=args.rank, lr=args.lr,
               batch=args.batch, epochs=args.epochs, max_length=args.max_length, stride=args.stride,
               warmup=args.warmup, checkpoint_every=args.checkpoint_every, device=args.device, init=args.init)
    (Path(args.out) / "fit.json").write_text(json.dumps(done, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(done), flush=True)
    if args.val:
        model, tokenizer = load_base(args.base)
        model = adapter(model, args.out).merge_and_unload().to(args.device).eval()
        started = time.time()
        measured = validate(model, tokenizer, read_examples(args.val), max_length=args.max_length, stride=args.stride,
                            device=args.device)
        measured["minutes"] = round((time.time() - started) / 60, 1)
        (Path(args.out) / "validation.json").write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(measured), flush=True)


if __name__ == "__main__":
    main()
