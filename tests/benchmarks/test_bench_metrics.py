"""Smoke test of the metrics-cost benchmarks (benchmarks/bench_metrics_inprocess.py) at the smallest scale.

It proves the harnesses run end to end against a real in-process broker, not what recording costs:
the figures come from full runs (docs/benchmarks.md, "The cost of metrics"). benchmarks/bench_metrics.py needs the Java producer perf tool and minutes;
its row runner is the one benchmarks/run.py uses.
"""

from __future__ import annotations

import asyncio

from benchmarks.bench_metrics_inprocess import isolated_cost_us, new_event_loop, toggled


def test_isolated_recording_costs_more_than_nothing() -> None:
    # The minimum of five short samples: one sample can take a preemption (CI saw "off" at 4.3 µs
    # against a usual 0.2 µs, on two busy cores); "on" is about nine times "off" undisturbed.
    on, off = isolated_cost_us(repeat=5, number=2000)
    assert on > off > 0


def test_toggled_blocks_measure_both_settings() -> None:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        cpu = runner.run(toggled(blocks=2, requests=20, records=10, size=100))
    assert len(cpu[False]) == 2 and len(cpu[True]) == 2
    assert all(v > 0 for v in cpu[False] + cpu[True])
