"""``tools.reproduce_experiments``: what counts as a number reproduced."""

from __future__ import annotations

from tools.reproduce_experiments import REL_TOL, differences


def test_a_number_reproduces_within_the_tolerance_and_a_record_field_is_not_a_number():
    committed = {"panel": {"mean": 8.282017567663482, "ci90": [1.0, 2.0], "code_version": "0.1.0+gaaaa"}}
    same = {"panel": {"mean": 8.282017628351847, "ci90": [1.0, 2.0], "code_version": "0.1.0+gbbbb", "new": 1}}
    assert differences(same, committed) == []  # 7e-9 apart (real-demand's qr, two runs); another commit
    moved = {"panel": {"mean": 8.282017567663482 * (1 + 10 * REL_TOL), "ci90": [1.0, 2.0]}}
    assert differences(moved, committed) == [f"/panel/mean: {moved['panel']['mean']!r}, committed 8.282017567663482"]
    assert differences({"panel": {"mean": 8.282017567663482, "ci90": [1.0]}}, committed) == [
        "/panel/ci90: 1 items, committed 2"
    ]
    assert differences({"panel": {"ci90": [1.0, 2.0]}}, committed) == ["/panel/mean: missing"]
