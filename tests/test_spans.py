"""gpart.base.spans: contiguous spans of array work, run one thread each."""

from __future__ import annotations

import threading

import numpy as np

from gpart.base.spans import even_spans, run_spans, weighted_spans


def test_even_spans_cover_the_range_once():
    assert even_spans(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert even_spans(2, 4) == [(0, 1), (1, 2)]  # no empty spans
    assert even_spans(0, 2) == []


def test_weighted_spans_split_by_cumulative_work():
    ends = np.cumsum([100, 1, 1, 1, 1, 100])  # the heavy items at both ends
    spans = weighted_spans(ends, 2)
    assert spans[0][0] == 0 and spans[-1][1] == 6 and all(a < b for a, b in spans)
    assert all(x[1] == y[0] for x, y in zip(spans, spans[1:]))
    assert spans == [(0, 3), (3, 6)]  # 102 and 102 of the 204
    assert weighted_spans(np.cumsum([5]), 3) == [(0, 1)]
    assert weighted_spans(np.zeros(0, dtype=np.int64), 2) == []


def test_run_spans_keeps_span_order_and_uses_threads():
    names = []

    def work(a: int, b: int) -> tuple[int, int]:
        names.append(threading.current_thread().name)
        return a, b

    spans = even_spans(100, 4)
    assert run_spans(work, spans) == spans
    assert all(name.startswith("gpart-span") for name in names)
    assert run_spans(work, [(0, 5)]) == [(0, 5)] and names[-1] == threading.current_thread().name
