"""Batches that pad little: the learned readers' inputs grouped by length, each group padded to its own longest.

A transformer pass over a padded batch costs about as much as if every row were as long as the
longest, plus a fixed cost for the pass itself. One question's windows often mix a long table or
code block with short paragraphs: padded as one batch, the span reader's windows for the knowledge
base's questions read about 35 % more tokens than they hold, the answer scorer's pairs about 55 %
more (`bench/RESULTS.md`, section 13). `length_batches` splits the rows, sorted by length, where the
padding saved outweighs the cost of one more pass: the cheapest such split, found exactly (dynamic
programming over the sorted lengths). A row's result moves only in its last float digits with the
width of its batch.

The split depends only on the lengths, so the same inputs always give the same batches.

>>> length_batches([40, 250, 45, 42], max_batch=32, pass_cost=48)
[[0, 3, 2], [1]]
"""

from __future__ import annotations

from collections.abc import Sequence

PASS_COST_TOKENS = 48
"""The fixed cost of one forward pass, in tokens' worth of work. MiniLM-L6 on two CPU cores: about 8 ms a pass
against 0.12-0.2 ms a token; re-reading the knowledge base's span-reader calls took the same time (within 1 %)
at any cost from 48 to 200, and 19 % longer at 0 (a pass per length)."""


def length_batches(lengths: Sequence[int], max_batch: int, pass_cost: float = PASS_COST_TOKENS) -> list[list[int]]:
    """The rows' indices in batches of at most ``max_batch``, shortest first, that minimise the padded tokens read plus
    ``pass_cost`` per batch. Rows of equal length keep their order."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    n = len(order)
    cost = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for end in range(1, n + 1):
        longest = lengths[order[end - 1]]
        for start in range(max(0, end - max_batch), end):
            here = cost[start] + pass_cost + (end - start) * longest
            if here < cost[end]:
                cost[end], cut[end] = here, start
    batches = []
    end = n
    while end:
        batches.append(order[cut[end]:end])
        end = cut[end]
    return batches[::-1]
