"""The paper's words of an experiment's claim, checked against its numbers.

The per-panel verdict (``panels.verdict``: OMGPT's mean final regret against the best benchmark's) is
the claim of most experiments. Four experiments claim more than that -- a trend across panels, a
comparison with ``Alg*``, a margin -- and :func:`check_claim` turns each part of their claim into a
check with the numbers behind it: ``[(the paper's words, holds, the numbers), ...]``, written into
``report.md``. An experiment without such a check returns ``[]``.
"""
from __future__ import annotations

from statistics import median

from omgpt.analysis.report import best_benchmark, final_demand_errors, final_regrets

Check = tuple[str, bool, str]


def _alg_star_match(result: dict) -> list[Check]:
    panels = [p for p in result["panels"] if "alg_star_match" in p]
    rows, grows, closed, beaten = [], [], [], []
    by_task: dict[str, dict[int, float]] = {}
    for p in panels:
        diffs = [abs(d[0]) for d in p["alg_star_match"]["diff"]]
        finals, (best, bench) = final_regrets(p), best_benchmark(p)
        by_task.setdefault(p["task"], {})[p["task_options"]["pool_size"]] = p["alg_star_match"]["mean_abs_diff"]
        row = (f"{p['title']}: mean |TF - Alg*| {p['alg_star_match']['mean_abs_diff']:.3g}, median {median(diffs):.3g}; "
               f"regret {finals['omgpt']:.3g} vs Alg* {finals['alg-star']:.3g} and {best} {bench:.3g}: ")
        if bench <= finals["alg-star"]:  # a tuned benchmark beats posterior sampling: there is no gap to close
            beaten.append(p["title"])
            rows.append(row + "the benchmark is below Alg*, no gap to close")
            continue
        # the share of the best benchmark's excess regret over Alg*'s that OMGPT closes (1 = matches Alg*)
        closed.append((bench - finals["omgpt"]) / (bench - finals["alg-star"]))
        rows.append(row + f"{100 * closed[-1]:.0f}% of the gap closed")
    for task, pools in sorted(by_task.items()):
        if len(pools) >= 2:
            small, large = min(pools), max(pools)
            grows.append((task, pools[small] < pools[large], f"{task} {pools[small]:.3g} -> {pools[large]:.3g}"))
    checks = [("OMGPT nearly matches Alg*: it closes at least 90% of the regret gap between the best benchmark and Alg* on every panel",
               all(c >= 0.9 for c in closed) and not beaten,
               f"{sum(c >= 0.9 for c in closed)} of {len(panels)} panels"
               + (f" ({len(beaten)} where the best benchmark is below Alg* itself)" if beaten else "") + "; " + "; ".join(rows))]
    if grows:
        checks.append(("the deviations grow with the number of environments (4 -> 100)", all(g for _, g, _ in grows),
                       "mean |TF - Alg*|: " + "; ".join(text for _, _, text in grows)))
    return checks


def _prior_benefit(result: dict) -> list[Check]:
    rows, holds = [], []
    for p in result["panels"]:
        finals, (best, bench) = final_regrets(p), best_benchmark(p)
        ours, star = finals["omgpt"], finals.get("alg-star")
        holds.append(ours < bench and (star is None or star < bench))
        star_text = f", Alg* {star:.3g}" if star is not None else ""
        rows.append(f"{p['title']}: OMGPT {ours:.3g}{star_text} vs {best} {bench:.3g} ({bench / ours:.1f}x OMGPT's)")
    return [("OMGPT and Alg* have lower regret than the prior-free benchmarks on every panel", all(holds),
             f"{sum(holds)} of {len(holds)} panels; " + "; ".join(rows))]


def _model_size(result: dict) -> list[Check]:
    from omgpt.analysis.experiment_figures import improvement_rate

    rate = {(p["grid"]["layers"], p["grid"]["dimension"]): improvement_rate(p) for p in result["panels"]}
    layers, dims = sorted({n for n, _ in rate}), sorted({d for _, d in rate})
    grid = "; ".join(f"{n} layers: " + ", ".join(f"d={d} {100 * rate[n, d]:+.1f}%" for d in dims) for n in layers)
    up = [all(rate[a, d] < rate[b, d] for a, b in zip(layers, layers[1:])) for d in dims]
    down = [all(rate[n, a] > rate[n, b] for a, b in zip(dims, dims[1:])) for n in layers]
    return [
        ("the improvement rate over the best of ILSE, CILS and TS is positive everywhere", all(r > 0 for r in rate.values()), grid),
        ("it grows with the number of layers", all(up), f"rising with depth at {sum(up)} of {len(dims)} dimensions"),
        ("it shrinks as the context dimension grows", all(down), f"falling with dimension at {sum(down)} of {len(layers)} depths"),
    ]


def _demand_prediction(result: dict) -> list[Check]:
    rows, wins, single, mixed = [], [], [], []
    for p in result["panels"]:
        m = p["demand_prediction"]["methods"]
        ours, ridge = final_demand_errors(p)
        wins.append(ours < ridge)
        # a panel testing one type of a model trained on two names it (the single-type model's panel does not)
        (mixed if "demand_types" in p.get("task_options", {}) else single).append(ridge / ours)
        rows.append(f"{p['title']}: MSE after {len(m['omgpt']['mse'])} samples {ours:.3g} vs ridge {ridge:.3g} (ridge / head {ridge / ours:.2f})")
    checks = [("the observation head's demand prediction error is below ridge regression's", all(wins), "; ".join(rows))]
    if single and mixed:
        checks.append(("by a wider margin for two demand types", min(mixed) > max(single),
                       f"ridge / head: single type {max(single):.2f}, two types {', '.join(f'{v:.2f}' for v in mixed)}"))
    return checks


CLAIMS = {"alg-star-match": _alg_star_match, "prior-benefit": _prior_benefit, "model-size": _model_size, "demand-prediction": _demand_prediction}


def check_claim(result: dict) -> list[Check]:
    """The parts of ``result``'s claim beyond the per-panel verdict, each checked (``[]`` if none)."""
    check = CLAIMS.get(result["name"])
    return check(result) if check else []
