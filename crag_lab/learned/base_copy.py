"""A copy of the bundled MiniLM small enough to send to a GPU machine: ``python -m crag_lab.learned.base_copy``.

A lent GPU machine receives at most 64 MiB with the working tree, and the float32 MiniLM alone is
91 MB. The copy is float16, with the word-embedding rows of the tokens that no training text uses set
to zero (the base is frozen during training and the adapters do not touch the embeddings, so those
rows are never read), compressed with xz: about 38 MB. ``fit.py`` and ``fit_router.py`` read the
folder as it is (`crag_lab.learned.fit.load_base` unpacks ``model.safetensors.xz`` on first use).
The adapters trained on it are measured and shipped on the float32 original.

    python -m crag_lab.learned.base_copy --texts pairs.json.gz --texts messages.json.gz --out BASE

``--texts`` takes the files the fits read (a pairs file, `fit.write_pairs`; a messages file,
`train_router --dump`; or a span examples file, `train_spans --dump`); every one of their texts is
tokenized to find the rows kept.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

TOKENIZER_FILES = ("config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
PACKED = "model.safetensors.xz"


def texts_of(path: str | Path) -> list[str]:
    """Every text of a pairs file (questions and texts), a messages file (training and validation) or a span
    examples file (passages and questions)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    if "pairs" in raw:
        return [*raw["questions"], *raw["texts"]]
    if "train" in raw:
        return [t for t, _ in [*raw["train"], *raw.get("val", [])]]
    if "examples" in raw and "passages" in raw:
        return [*raw["passages"], *(e[0] for e in raw["examples"])]
    raise SystemExit(f"base_copy: {path} is neither a pairs file (fit.write_pairs), a messages file "
                     "(train_router --dump) nor a span examples file (train_spans --dump)")


def write_copy(source: str | Path, out: str | Path, texts: Iterable[str]) -> dict[str, int]:
    """Write the copy of the model in ``source`` to ``out``; how many embedding rows were kept, of how many."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    source, out = Path(source), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(source / name, out / name)
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    used = set(tokenizer.all_special_ids)
    texts = list(texts)
    for start in range(0, len(texts), 4096):
        for ids in tokenizer(texts[start:start + 4096], add_special_tokens=False)["input_ids"]:
            used.update(ids)
    state = {k: v.half() for k, v in load_file(str(source / "model.safetensors")).items()}
    key = next(k for k in state if k.endswith("word_embeddings.weight"))
    keep = torch.zeros(state[key].shape[0], dtype=torch.bool)
    keep[sorted(used)] = True
    state[key][~keep] = 0
    plain = out / "model.safetensors"
    save_file(state, str(plain))
    with open(plain, "rb") as f, lzma.open(out / PACKED, "wb", preset=6) as g:
        shutil.copyfileobj(f, g)
    plain.unlink()
    return {"rows_kept": int(keep.sum()), "rows": int(keep.numel())}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crag_lab.learned.base_copy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", action="append", required=True,
                        help="a pairs, messages or span examples file (repeat for more)")
    parser.add_argument("--out", required=True, help="the folder to write (tokenizer files and model.safetensors.xz)")
    parser.add_argument("--source", help="the model folder to copy (default: the bundled MiniLM)")
    args = parser.parse_args(argv)
    for path in args.texts:
        if not Path(path).is_file():
            raise SystemExit(f"base_copy: --texts {path} is not a file; give the pairs or messages file the fit reads")
    if args.source:
        source = args.source
    else:
        from crag_lab.embeddings import model_dir

        source = model_dir()
    kept = write_copy(source, args.out, (t for path in args.texts for t in texts_of(path)))
    size = (Path(args.out) / PACKED).stat().st_size / 1e6
    print(f"wrote {args.out}: {kept['rows_kept']:,} of {kept['rows']:,} embedding rows kept, {PACKED} {size:.1f} MB")


if __name__ == "__main__":
    main()
