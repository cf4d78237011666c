"""Warm-up ends when the times stop falling (bench/allreduce/settle.py), never before the
minimum, and always by the iteration and time caps."""

from __future__ import annotations

import pytest

from ringtrain.bench.allreduce import settle


def _stop_at(times: list[float], minimum: int = 1) -> int:
    for n in range(1, len(times) + 1):
        if settle.settled(times[:n], minimum=minimum):
            return n
    return -1


def test_a_steady_op_stops_after_two_windows() -> None:
    assert _stop_at([0.03] * 20) == 6
    assert _stop_at([0.03] * 20, minimum=10) == 10


def test_a_falling_op_warms_up_until_it_stops_falling() -> None:
    falling = [0.14, 0.13, 0.13, 0.12, 0.09, 0.07, 0.05, 0.04, 0.033, 0.032, 0.034, 0.033,
               0.032, 0.033, 0.032, 0.033]
    stop = _stop_at(falling)
    assert stop >= 11 and all(t < 0.035 for t in falling[stop - 3:stop])


def test_noise_around_a_level_and_a_single_spike_still_settle() -> None:
    assert _stop_at([0.030, 0.033, 0.031, 0.032, 0.030, 0.031, 0.033]) == 6
    assert _stop_at([0.03, 0.03, 0.03, 0.03, 0.09, 0.03, 0.03]) == 6  # medians ignore it


def test_the_caps() -> None:
    assert settle.settled([1.0] * settle.MAX_ITERATIONS)
    assert settle.settled([float(settle.MAX_SECONDS)])
    assert not settle.settled([])


def test_summary() -> None:
    got = settle.summary([0.14, 0.05, 0.03, 0.03, 0.03])
    assert got == {"iterations": 5, "seconds": pytest.approx(0.28), "first_s": 0.14,
                   "last_s": 0.03}
