import pytest

from eve_search.benchmarks.throughput import LOOPS, throughput


def test_throughput_measures_every_loop_against_the_floor():
    # One round: each median is that round's figure, so the ratios must be exactly the rates' ratios.
    report = throughput(seconds=0.15, rounds=1, rows=2048)
    ups = report.units_per_second
    assert set(ups) == set(LOOPS) and report.rounds == 1
    assert all(rate > 0 for rate in ups.values())
    for name in LOOPS:
        assert report.floor_ratio[name] == pytest.approx(ups["floor"] / ups[name], rel=1e-12)
    assert report.eve_over_adam == pytest.approx(ups["eve"] / ups["adam"], rel=1e-12)
    assert all(0.0 < share <= 1.0 for share in report.time_in_passes.values())
    assert 0.0 <= report.eve_fallback_rate <= 1.0


def test_throughput_rejects_bad_arguments():
    with pytest.raises(ValueError, match="Invalid seconds: 0"):
        throughput(seconds=0)
    with pytest.raises(ValueError, match="Invalid rounds: 0"):
        throughput(rounds=0)
    with pytest.raises(ValueError, match="Invalid rounds: True"):
        throughput(rounds=True)
