"""A tuning worker for the 18 real-demand settings (pending/README.md): it claims (setting, benchmark)
pairs by mkdir in /tmp/claims, skips entries already tuned on the scaled cost, and runs `omgpt tune` for
one benchmark at a time, cheapest first. Start two from the checkout's root, one thread each, so they
share the settings:

    rm -rf /tmp/claims; for w in A B; do OMP_NUM_THREADS=1 nohup .venv/bin/python $MAIN/pending/tune_worker.py > /tmp/tune$w.log 2>&1 & done

(from the root of the checkout whose code tunes, MAIN being the checkout that holds this file).

A worker killed mid-benchmark leaves its claim: clear /tmp/claims before starting again (a finished
benchmark is in its file and skipped)."""
import json, os, subprocess, sys
from pathlib import Path
os.environ["OMP_NUM_THREADS"] = "1"
sys.path.insert(0, os.getcwd())
from omgpt.tasks import make_episode_task
from omgpt.tuning import setting_key, tuned_path

SETTINGS = [dict(split="series", split_seed=0, critical_ratio=q) for q in (0.75, 0.5, 0.9)]
SETTINGS += [dict(split="time", critical_ratio=q) for q in (0.75, 0.5, 0.9)]
SETTINGS += [dict(split="series", split_seed=s, critical_ratio=q) for q in (0.75, 0.5, 0.9) for s in (1, 2, 3, 4)]
POLICIES = ["saa", "saa-weekday", "qr", "fai-data", "gbm"]
claims = Path("/tmp/claims"); claims.mkdir(exist_ok=True)
for opts in SETTINGS:
    options = {"dataset": "bakery", **opts}
    task = make_episode_task("newsvendor-data", options, 100)
    path = tuned_path(setting_key("newsvendor-data", task.options(), 100))
    for pol in POLICIES:
        done = json.loads(path.read_text())["policies"] if path.is_file() else {}
        if (done.get(pol, {}).get("final_regret") or {}).get("metric") == "scaled_cost":
            continue
        try:
            (claims / f"{path.stem}--{pol}").mkdir()
        except FileExistsError:
            continue
        args = [".venv/bin/omgpt", "tune", "--task", "newsvendor-data", "--horizon", "100", "--runs", "1000", "--policies", pol]
        for k, v in options.items():
            args += ["--option", f"{k}={v}"]
        print("RUN", " ".join(args), flush=True)
        rc = subprocess.call(args)
        print("EXIT", rc, path.stem, pol, flush=True)
