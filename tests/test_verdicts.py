"""Three-state verdicts from paired intervals, and runs sized by a validation pilot (panels.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omgpt.commands.experiment.panels import runs_for, state, versus_best, verdict


class _Played:
    """What versus_best reads of a rollout: the per-run cumulative regret (here only its last step)."""

    def __init__(self, finals):
        self.finals = torch.as_tensor(finals, dtype=torch.float64)

    def cumulative_regret(self):
        return self.finals[:, None]


@pytest.mark.parametrize(
    "ci, statistic, expected",
    [
        ([0.80, 0.95], "ratio", "below"),
        ([0.90, 1.10], "ratio", "level"),
        ([1.05, 1.20], "ratio", "behind"),
        ([1.20, None], "ratio", "behind"),  # open above, wholly over 1
        ([0.90, None], "ratio", "level"),
        ([-2.0, -0.1], "difference", "below"),
        ([-0.3, 2.5], "difference", "level"),  # main-results' queueing panel on 100 runs of seed 6
        ([0.2, 2.7], "difference", "behind"),
        (None, "ratio", "level"),  # one run: no interval, no verdict either way
    ],
)
def test_a_verdict_has_three_states(ci, statistic, expected):
    assert state(ci, statistic) == expected


def test_the_comparison_is_paired_and_a_ratio_unless_a_regret_can_be_negative():
    rng = np.random.default_rng(0)
    bench = rng.uniform(5, 15, 400)
    # OMGPT 10% below the benchmark on every environment, plus small noise: paired, the interval is
    # narrow even though the environments' spread (5-15) dwarfs the gap
    ours = 0.9 * bench + rng.normal(0, 0.1, 400)
    out = versus_best({"omgpt": _Played(ours), "erm": _Played(bench)}, ["omgpt"], "erm")["omgpt"]
    assert out["statistic"] == "ratio" and out["against"] == "erm" and out["runs"] == 400
    assert out["mean"] == pytest.approx(ours.mean() / bench.mean())
    assert out["ci90"][1] < 0.92 and out["state"] == "below"
    # unpaired, the same gap would not be resolved: shuffle OMGPT's runs against the benchmark's
    shuffled = versus_best({"omgpt": _Played(rng.permutation(ours)), "erm": _Played(bench)}, ["omgpt"], "erm")
    assert shuffled["omgpt"]["ci90"][1] - shuffled["omgpt"]["ci90"][0] > 5 * (out["ci90"][1] - out["ci90"][0])
    # queueing's regret can be negative: the difference, whose null is 0
    signed = versus_best({"omgpt": _Played(bench - 11), "ce": _Played(bench - 10)}, ["omgpt"], "ce")["omgpt"]
    assert signed["statistic"] == "difference" and signed["mean"] == pytest.approx(-1.0)
    assert signed["state"] == "below"


def test_runs_follow_the_paired_spread():
    """Hand-computed: sd 1, mean 1, effect 10% -> ((1.6449 + 0.8416) * 1 / 0.1)^2 = 618.3 -> 619 runs; four
    times the spread, sixteen times the runs (to rounding)."""
    assert runs_for(1.0, 1.0, 0.1) == 619
    assert runs_for(4.0, 1.0, 0.1) == pytest.approx(16 * 618.27, abs=1)
    assert runs_for(1.0, -2.0, 0.1) == runs_for(0.5, 1.0, 0.1)  # the gap is relative to |mean|


def test_the_verdict_names_its_state_and_interval():
    panel = {
        "benchmarks": ["erm"],
        "models_compared": ["omgpt"],
        "policies": {"omgpt": {"final_regret": {"mean": 4.0}}, "erm": {"final_regret": {"mean": 5.0}}},
        "best_benchmark": {"name": "erm"},
        "vs_best": {
            "omgpt": {
                "against": "erm",
                "statistic": "ratio",
                "mean": 0.8,
                "ci90": [0.7, 1.02],
                "runs": 300,
                "state": "level",
            }
        },
    }
    assert verdict(panel) == (
        "OMGPT 4.00 is level with the best benchmark (erm 5.00): paired ratio 0.80× [0.70, 1.02] over 300 runs"
    )
    del panel["vs_best"]
    assert "no paired interval" in verdict(panel)
