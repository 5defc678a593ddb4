"""Length batches: the learned readers' rows grouped by length so that a batch pads little."""

from __future__ import annotations

import pytest

from crag_lab.learned.batching import length_batches


def padded(lengths: list[int], batches: list[list[int]], pass_cost: float) -> float:
    return sum(pass_cost + len(b) * max(lengths[i] for i in b) for b in batches)


def test_one_long_row_among_short_ones_gets_its_own_batch() -> None:
    lengths = [40, 250, 45, 42, 38]
    batches = length_batches(lengths, max_batch=32, pass_cost=48)
    assert batches == [[4, 0, 3, 2], [1]]
    assert padded(lengths, batches, 48) < padded(lengths, [list(range(5))], 48)  # 226 + 298 < 48 + 1250


def test_rows_of_like_length_stay_in_one_pass_when_a_pass_costs_more_than_their_padding() -> None:
    assert length_batches([100, 110, 120], max_batch=32, pass_cost=48) == [[0, 1, 2]]
    assert length_batches([100, 110, 120], max_batch=32, pass_cost=5) == [[0], [1], [2]]


def test_every_row_is_read_once_and_no_batch_is_too_big() -> None:
    lengths = [(7 * i) % 53 + 10 for i in range(70)]
    batches = length_batches(lengths, max_batch=8)
    assert sorted(i for b in batches for i in b) == list(range(70))
    assert max(len(b) for b in batches) <= 8


def test_the_split_is_the_cheapest_one() -> None:
    import itertools

    lengths = [12, 90, 30, 31, 200, 33, 95]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    best = min(padded(lengths, [order[a:b] for a, b in itertools.pairwise((0, *cuts, len(order)))], 48)
               for k in range(len(order)) for cuts in itertools.combinations(range(1, len(order)), k))
    assert padded(lengths, length_batches(lengths, max_batch=32, pass_cost=48), 48) == best


def test_no_rows_give_no_batches_and_a_batch_of_zero_is_refused() -> None:
    assert length_batches([], max_batch=4) == []
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        length_batches([3], max_batch=0)
