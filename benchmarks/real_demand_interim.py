# Run: OMP_NUM_THREADS=1 python -m benchmarks.real_demand_interim 0.75   (~3 CPU-minutes)
"""Interim real-demand numbers (issue 31): the shipped models pretrained/bakery (series split 0) and
pretrained/bakery-time, chosen on the old rule, against the benchmarks at their paper constants (no
tuning; gbm with the new lag features, level weights and early stopping at its default constants),
scored by the scaled cost with cluster-bootstrap intervals."""
import json, sys, time
from pathlib import Path
from omgpt.commands.experiment.registry import Panel, all_kinds
kind = all_kinds()["real-demand"]
q = float(sys.argv[1]) if len(sys.argv) > 1 else 0.75
models = {"series0": {"ckpt": "results/models/newsvendor-data-a4d096ba2e/model.ckpt"}, "time": {"ckpt": "pretrained/bakery-time/model.ckpt"}}
panels = []
for split, title, model in (("series", f"Held-out stores (split 0), q = {q}", "series0"), ("time", f"Later dates, q = {q}", "time")):
    options = {"dataset": "bakery", "split": split, "part": "test", "critical_ratio": q}
    panel = Panel(title=title, model=model, task="newsvendor-data", horizon=100, figure_file="curves", task_options=options,
                  policies=["omgpt", "saa", "saa-weekday", "qr", "fai-data", "gbm", "hindsight-linear"],
                  tuned_task="newsvendor-data", tuned_options=options, tuned_on="none")
    t = time.process_time()
    panels.append(kind.evaluate(panel, models, runs=1000, seed=0, device="cpu"))
    print(kind.headline(panels[-1]), f"({time.process_time() - t:.0f} CPU s)", flush=True)

result = {"panels": panels}
print("\n".join(kind.sections(result)[:20]))
for c in kind.claims(result): print(c)
