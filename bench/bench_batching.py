"""The learned readers' batches: one batch padded to its longest row against rows grouped by length.

The offline model's span reader (`crag_lab.learned.SpanReader`) reads every item of a question's
evidence in one call, and its answer scorer (`crag_lab.learned.AnswerScorer`) the best units of every
item a grading round sees. Before, each call's rows went through the model in batches padded to their
longest (a table or code block next to short paragraphs); now
`crag_lab.learned.batching.length_batches` groups them by length. This bench asks stratified KB
questions with the offline model on a prepared index, records every call of both readers, then makes
those calls again, each call both ways back to back (which goes first alternates), with the
reader's memory cleared before each call. Reported per reader: the time of all calls (median of the
repeats) and per call, the tokens each way reads (padding included), and whether the results agree.

    .venv/bin/python bench/bench_batching.py [--quick] [--json PATH]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from _common import KB, emit, load_rows, log, parse_args, ratio, stratified, summary


def one_batch(lengths: Sequence[int], max_batch: int, pass_cost: float = 0.0) -> list[list[int]]:
    """What the span reader did before: its windows in order, ``max_batch`` at a time."""
    return [list(range(lo, min(lo + max_batch, len(lengths)))) for lo in range(0, len(lengths), max_batch)]


def sorted_batches(lengths: Sequence[int], max_batch: int, pass_cost: float = 0.0) -> list[list[int]]:
    """What the scorer did before: its pairs sorted by length (it sorted by characters), ``max_batch`` at a time."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[lo:lo + max_batch] for lo in range(0, len(order), max_batch)]


def record_calls(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Every (question, passages) the span reader reads and every list of pairs the scorer scores."""
    from crag_lab import Lab
    from crag_lab.learned import AnswerScorer, SpanReader

    calls: dict[str, list[Any]] = {"spans": [], "scorer": []}
    read, predict = SpanReader.read, AnswerScorer.predict

    def reading(self: SpanReader, question: str, passages: Sequence[str], batch_size: int = 32) -> list[Any]:
        calls["spans"].append((question, list(passages)))
        return read(self, question, passages, batch_size)

    def scoring(self: AnswerScorer, pairs: Sequence[tuple[str, str]], batch_size: int = 64) -> Any:
        calls["scorer"].append(list(pairs))
        return predict(self, pairs, batch_size)

    lab = Lab.from_directory(KB, remote=False)
    lab.prepare()
    SpanReader.read, AnswerScorer.predict = reading, scoring  # type: ignore[method-assign]
    try:
        for row in rows:
            lab.ask(row["question"])
    finally:
        SpanReader.read, AnswerScorer.predict = read, predict  # type: ignore[method-assign]
    return {"spans": [c for c in calls["spans"] if any(p.strip() for p in c[1])], "scorer": [c for c in calls["scorer"] if c]}


def span_lengths(reader: Any, call: tuple[str, list[str]]) -> list[int]:
    from crag_lab.learned.fit_spans import windows

    question, passages = call
    texts = [p for p in passages if p.strip()]
    return [len(ids) for ids in windows(reader._tokenizer, [question] * len(texts), texts,
                                        max_length=reader.max_length, stride=reader.stride)["input_ids"]]


def scorer_lengths(scorer: Any, pairs: list[tuple[str, str]]) -> list[int]:
    fresh = list(dict.fromkeys(pairs))
    return [len(ids) for ids in scorer._tokenizer([q for q, _ in fresh], [t for _, t in fresh], truncation="only_second",
                                                  max_length=scorer.card.max_length)["input_ids"]]


def tokens(lengths: Sequence[list[int]], plan: Callable[..., list[list[int]]], max_batch: int) -> dict[str, int]:
    real = padded = 0
    for row in lengths:
        real += sum(row)
        padded += sum(len(b) * max(row[i] for i in b) for b in plan(row, max_batch))
    return {"real": real, "padded": padded}


def compare(name: str, calls: Sequence[Any], run: Callable[[Any], Any], repeats: int,
            agree: Callable[[Any, Any], dict[str, Any]], before: Callable[..., list[list[int]]]) -> dict[str, Any]:
    """Each call both ways (``before`` and `length_batches`) back to back, ``repeats`` times; which way goes first
    alternates from call to call and from repeat to repeat, so a change in the machine's load meets both alike."""
    from crag_lab.learned import batching

    grouped = batching.length_batches
    ways = {"before": before, "length_batches": grouped}
    total: dict[str, list[float]] = {w: [] for w in ways}
    per_call: dict[str, list[float]] = {w: [] for w in ways}
    found: dict[str, list[Any]] = {w: [] for w in ways}
    for rep in range(repeats):
        times: dict[str, list[float]] = {w: [] for w in ways}
        for i, call in enumerate(calls):
            for way in (list(ways) if (rep + i) % 2 == 0 else list(ways)[::-1]):
                batching.length_batches = ways[way]  # type: ignore[assignment]  # the readers look it up at each call
                try:
                    start = time.perf_counter()
                    out = run(call)
                    times[way].append((time.perf_counter() - start) * 1000)
                finally:
                    batching.length_batches = grouped
                if rep == repeats - 1:
                    found[way].append(out)
        for way in ways:
            total[way].append(sum(times[way]))
            per_call[way] += times[way]
        log(f"{name} repeat {rep + 1}/{repeats}: " + ", ".join(f"{w} {total[w][-1]:.0f} ms" for w in ways))
    return {"calls": len(calls), "total_ms": {w: summary(v, 1) for w, v in total.items()},
            "per_call_ms": {w: summary(v, 2) for w, v in per_call.items()},
            "ratio_total_median": ratio(summary(total["length_batches"])["median"], summary(total["before"])["median"]),
            **agree(found["before"], found["length_batches"])}


def span_agreement(before: Sequence[Any], after: Sequence[Any]) -> dict[str, Any]:
    pairs = [(a, b) for x, y in zip(before, after, strict=True) for a, b in zip(x, y, strict=True)]
    finite = [abs(a.margin - b.margin) for a, b in pairs if a.margin != float("-inf")]
    return {"rows": len(pairs), "same_result": sum(a.text == b.text and a.start == b.start for a, b in pairs),
            "same_number": sum(a.margin == b.margin for a, b in pairs),
            "max_difference": round(max(finite, default=0.0), 6)}


def scorer_agreement(before: Sequence[Any], after: Sequence[Any]) -> dict[str, Any]:
    import numpy as np

    a, b = np.concatenate(before), np.concatenate(after)
    return {"rows": len(a), "same_result": int((np.round(a, 3) == np.round(b, 3)).sum()),
            "same_number": int((a == b).sum()), "max_difference": float(np.abs(a - b).max(initial=0.0))}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    from crag_lab.learned import AnswerScorer, SpanReader, batching

    rows = stratified([r for r in load_rows() if r["complexity"] != "chitchat"], 20 if args.quick else 60)
    log(f"recording the readers' calls on {len(rows)} questions")
    calls = record_calls(rows)
    reader, scorer = SpanReader.load(), AnswerScorer.load()
    repeats = 1 if args.quick else 2

    def read(call: tuple[str, list[str]]) -> Any:
        reader._memo.clear()
        return reader.read(*call)

    def score(pairs: list[tuple[str, str]]) -> Any:
        scorer._memo.clear()
        return scorer.predict(pairs)

    result: dict[str, Any] = {"questions": len(rows), "pass_cost_tokens": batching.PASS_COST_TOKENS, "repeats": repeats}
    result["spans"] = compare("spans", calls["spans"], read, repeats, span_agreement, one_batch)
    result["spans"]["tokens"] = {way: tokens([span_lengths(reader, c) for c in calls["spans"]], plan, 32)
                                 for way, plan in (("before", one_batch), ("length_batches", batching.length_batches))}
    result["scorer"] = compare("scorer", calls["scorer"], score, repeats, scorer_agreement, sorted_batches)
    result["scorer"]["tokens"] = {way: tokens([scorer_lengths(scorer, c) for c in calls["scorer"]], plan, 64)
                                  for way, plan in (("before", sorted_batches), ("length_batches", batching.length_batches))}
    emit(result, args.json_out)


if __name__ == "__main__":
    main()
