import pytest

from eve_search.benchmarks.throughput import LOOPS, throughput


def test_throughput_measures_every_loop_against_the_floor():
    report = throughput(seconds=0.15, rounds=2, rows=2048)
    assert set(report.units_per_second) == set(LOOPS)
    assert all(rate > 0 for rate in report.units_per_second.values())
    assert report.floor_ratio["floor"] == pytest.approx(1.0)
    assert report.eve_over_adam == pytest.approx(
        report.units_per_second["eve"] / report.units_per_second["adam"], rel=0.5)
    assert all(0.0 < share <= 1.0 for share in report.time_in_passes.values())
    assert 0.0 <= report.eve_fallback_rate <= 1.0


def test_throughput_rejects_bad_arguments():
    with pytest.raises(ValueError, match="Invalid seconds: 0"):
        throughput(seconds=0)
    with pytest.raises(ValueError, match="Invalid rounds: 0"):
        throughput(rounds=0)
