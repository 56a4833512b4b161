"""Calibration, threshold search and metrics on constructed scores with known answers."""

import numpy as np
import pytest

from inference.metrics import (action_table, evaluate_scores, expected_calibration_error, query_action,
                               ranking_metrics, roc_auc)
from inference.calibration import Calibration
from training.fitting import fit_calibration, search_thresholds


def test_auc_known_values():
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)
    assert roc_auc([0.2, 0.3], [1, 1]) is None


def test_ece_perfect_and_off():
    assert expected_calibration_error([0.0, 1.0], [0, 1]) == pytest.approx(0.0)
    # all scored 0.8 but only half relevant -> ECE 0.3
    assert expected_calibration_error([0.8] * 10, [1] * 5 + [0] * 5) == pytest.approx(0.3)


def test_ranking_metrics():
    # query a: positive ranked 2nd; query b: positive first; query c: one passage only (ignored)
    m = ranking_metrics([0.9, 0.5, 0.1, 0.2, 0.7, 0.3], [0, 1, 0, 0, 1, 1], ["a", "a", "a", "b", "b", "c"])
    assert m["mrr@10"] == pytest.approx((0.5 + 1.0) / 2)
    assert m["ranking_queries"] == 2
    assert m["ndcg@10"] == pytest.approx(((1 / np.log2(3)) + 1.0) / 2)


def test_actions_and_query_rule():
    t = action_table([0.9, 0.6, 0.1, 0.95], [1, 0, 0, 0], theta_high=0.8, theta_low=0.5)
    assert t["positive"] == {"Correct": 1, "Ambiguous": 0, "Incorrect": 0}
    assert t["negative"] == {"Correct": 1, "Ambiguous": 1, "Incorrect": 1}
    assert query_action(["Incorrect", "Ambiguous"]) == "Ambiguous"
    assert query_action(["Incorrect", "Correct", "Ambiguous"]) == "Correct"
    assert query_action(["Incorrect"]) == "Incorrect"
    m = evaluate_scores([0.9, 0.6, 0.1, 0.95], [1, 0, 0, 0], 0.8, 0.5)
    assert m["accuracy"] == pytest.approx(0.75) and m["precision"] == pytest.approx(0.5) and m["recall"] == 1.0


def test_platt_recovers_known_parameters():
    rng = np.random.default_rng(0)
    z = rng.normal(0, 3, 20000)
    a, b = 0.5, -1.0
    y = (rng.random(len(z)) < 1 / (1 + np.exp(-(a * z + b)))).astype(float)
    c = fit_calibration(z, y, "platt")
    assert c.a == pytest.approx(a, abs=0.05) and c.b == pytest.approx(b, abs=0.08)
    t = fit_calibration(z, (rng.random(len(z)) < 1 / (1 + np.exp(-z / 4))).astype(float), "temperature")
    assert 1 / t.a == pytest.approx(4.0, rel=0.1) and t.b == 0.0
    assert Calibration.from_dict(c.to_dict()).apply([0.0])[0] == pytest.approx(1 / (1 + np.exp(1.0)), abs=0.05)


def test_calibration_needs_both_classes():
    with pytest.raises(ValueError, match="both positive and negative"):
        fit_calibration([0.1, 0.2], [1, 1])


def test_threshold_search_on_constructed_scores():
    # 100 pairs: scores 0.00..0.99; relevant iff score >= 0.60, except two noisy ones
    s = np.arange(100) / 100
    y = (s >= 0.6).astype(int)
    y[65] = 0  # a false positive high up
    y[20] = 1  # a false negative low down
    th = search_thresholds(s, y, precision_target=0.95, npv_target=0.95, min_dev_pairs=50)
    assert th.method == "dev-search"
    # precision of score >= 0.60 is 39/40 = 0.975 and stays >= 0.95 above; at 0.59 it would be 39/41 = 0.951 ... 0.57: 39/43
    assert th.theta_high == pytest.approx(0.59)
    # NPV of score < t: 1 false negative at 0.20; stays >= 0.95 up to t = 0.60 (59/60 = 0.983 below)
    assert th.theta_low == pytest.approx(0.59) or th.theta_low <= th.theta_high
    assert th.theta_low <= th.theta_high


def test_threshold_search_is_not_pushed_up_by_one_top_negative():
    # the highest-scored pair is a negative; below it 30 positives, then 70 negatives
    s = np.r_[[0.99], np.linspace(0.95, 0.65, 30), np.linspace(0.6, 0.0, 70)]
    y = np.r_[[0], np.ones(30), np.zeros(70)].astype(int)
    th = search_thresholds(s, y, precision_target=0.9, npv_target=0.9)
    # precision(score >= 0.65) = 30/31 = 0.968; at s[31] = 0.6 it is 30/32 = 0.9375, at s[32] 30/33 = 0.909,
    # at s[33] 30/34 = 0.882: the lowest threshold reaching 0.9 is s[32]
    assert th.theta_high == pytest.approx(s[32])
    # every pair below 0.65 is negative, so NPV(score < t) = 1 up to t = 0.65
    assert th.theta_low == pytest.approx(0.65) or th.theta_low == th.theta_high
    assert th.method == "dev-search"


def test_threshold_search_separates_bands():
    s = np.r_[np.linspace(0.0, 0.3, 40), np.linspace(0.3, 0.7, 20), np.linspace(0.7, 1.0, 40)]
    y = np.r_[np.zeros(40), np.tile([0, 1], 10), np.ones(40)].astype(int)
    th = search_thresholds(s, y, precision_target=0.95, npv_target=0.95)
    assert 0.3 < th.theta_low < th.theta_high < 0.75
    assert th.dev_pairs == 100 and th.dev_positives == 50


def test_threshold_search_small_dev_uses_paper_defaults():
    th = search_thresholds([0.1, 0.9, 0.8], [0, 1, 1])
    assert (th.theta_high, th.theta_low, th.method) == (0.79, 0.50, "paper-default")
    assert "too small" in th.notes[0]
