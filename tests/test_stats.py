"""Welch's test of a difference over seeds, Holm's correction, and the verdict they give."""

import math

import pytest
from scipy import stats

from bench.report.stats import Difference, holm, verdict, welch


def test_welch_is_scipys_unequal_variance_test_with_its_interval():
    a, b = [0.91, 0.93, 0.92, 0.95], [0.88, 0.90, 0.86]
    d = welch(a, b)
    reference = stats.ttest_ind(a, b, equal_var=False)
    assert d.p == pytest.approx(reference.pvalue)
    assert d.diff == pytest.approx(sum(a) / 4 - sum(b) / 3)
    assert d.low < d.diff < d.high
    assert (d.low, d.high) == pytest.approx(tuple(reference.confidence_interval()))
    assert (d.n_a, d.n_b) == (4, 3)


def test_overlapping_intervals_can_still_differ_significantly():
    # each mean's 95% CI overlaps the other's, yet the difference's test is significant
    a, b = [10.0, 11.0, 12.0, 13.0, 14.0], [7.4, 8.4, 9.4, 10.4, 11.4]
    half = lambda v: stats.t.ppf(0.975, 4) * stats.tstd(v) / math.sqrt(5)  # noqa: E731
    assert 12 - half(a) < 9.4 + half(b)
    assert welch(a, b).p < 0.05 and verdict(welch(a, b), claimed_positive=True) == "supported"


def test_one_seed_or_no_spread_gives_no_test_and_no_verdict():
    for d in (welch([0.9], [0.8, 0.7]), welch([0.9, 0.9], [0.8, 0.8])):
        assert math.isnan(d.p) and math.isnan(d.low) and verdict(d, True) == "inconclusive"
        assert "no test" in d.describe()


def test_holm_steps_down_and_skips_untested_comparisons():
    untested = Difference(0.1, math.nan, math.nan, math.nan, 1, 1)
    tests = [Difference(1, 0, 2, p, 3, 3) for p in (0.01, 0.04, 0.03)] + [untested]
    assert [d.p_holm for d in holm(tests)[:3]] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(holm(tests)[3].p_holm)
    assert "Holm-corrected p = 0.03" in holm(tests)[0].describe()


def test_verdict_follows_the_claimed_direction_and_the_corrected_p():
    better, worse = Difference(0.2, 0.1, 0.3, 0.001, 3, 3), Difference(-0.2, -0.3, -0.1, 0.001, 3, 3)
    assert verdict(better, claimed_positive=True) == "supported"
    assert verdict(worse, claimed_positive=True) == "contradicted"
    assert verdict(worse, claimed_positive=False) == "supported"  # lower is better, e.g. WER
    corrected = holm([better, Difference(0.2, 0.1, 0.3, 0.04, 3, 3)])[1]
    assert corrected.p_holm == pytest.approx(0.04) and verdict(corrected, True) == "supported"
    three = holm([Difference(0.2, 0.1, 0.3, p, 3, 3) for p in (0.03, 0.02, 0.02)])
    assert verdict(three[0], True) == "inconclusive"  # p = 0.03 alone, 0.06 among three


def test_report_numbers_are_never_in_scientific_notation():
    from bench.records.numbers import fmt

    assert fmt(11010.5) == "11,010" and fmt(123456789.0) == "123,456,789"
    assert fmt(1234.5) == "1234" and fmt(3.14159) == "3.142" and fmt(0.0001234) == "0.0001234"
    assert "e" not in fmt(1e-7) and fmt(float("nan")) == "-"
