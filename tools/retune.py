"""Re-tune every shipped setting of ``configs/tuned/`` (after a change to the validation streams, a
benchmark or a grid): each file's setting, each of its benchmarks, on the validation environments it
was tuned on (its runs and seed), with the grid-widening rule of :mod:`omgpt.tuning`.

    python -m tools.retune --estimate            # the settings, their benchmarks, the estimated time; tunes nothing
    python -m tools.retune                       # re-tune them all, one setting after another
    python -m tools.retune --only 'mab-*'        # the settings whose file name matches (fnmatch), repeatable
    python -m tools.retune --folder /tmp/tuned   # write there instead (a trial: configs/tuned/ unchanged)

Each setting is one ``omgpt tune`` (:func:`omgpt.commands.tune.run_tuning`): its file is read, merged and
written under its lock, so an interrupted re-tune leaves every file whole (re-tuned or not) and running
it again re-tunes everything again. The estimate comes from the files' own record of the seconds each
benchmark took per grid point (CPU seconds where recorded, else the wall-clock of the machine that tuned
it) times the points the grids now have: a
lower end (no winner on a grid's end) and an upper end (every end a winner sat on widened by
:data:`~omgpt.tuning.WIDEN_STEPS` steps).
"""

from __future__ import annotations

import sys
import fnmatch
import math
from pathlib import Path

from omgpt.errors import OMGPTError
from omgpt.policies import POLICIES
from omgpt.tuning import TUNED, WIDEN_STEPS, read_tuned
from omgpt.entry import InputFolder, OutputFolder, Text, entry_point, script_parser


def settings(folder: Path, only: list[str]) -> list[tuple[Path, dict]]:
    files = sorted(folder.glob("*.json"))
    chosen = [p for p in files if not only or any(fnmatch.fnmatch(p.stem, g) for g in only)]
    if not chosen:
        raise OMGPTError(f"no tuned file in {folder} matches {' '.join(only) or '*'}")
    return [(p, read_tuned(p)) for p in chosen]  # every file checked before any tuning


def estimate(entry: dict, name: str) -> tuple[float, float]:
    """Seconds to re-tune one benchmark: (no widening, every end its old winner sat on widened to the bound)."""
    per_point = entry.get("cpu_seconds", entry.get("seconds", 0.0)) / max(1, len(entry.get("curve") or [1]))
    tunable = POLICIES[name][0].tunable
    points = math.prod(len(v) for v in tunable.values())
    widened = points
    for k, v in entry["constants"].items():
        values = tunable.get(k, ())
        if len(values) > 1 and v in (min(values), max(values)):
            widened += WIDEN_STEPS * points // len(values)  # each step adds the other constants' grid once
    return per_point * points, per_point * widened


@entry_point
def main(argv: list[str] | None = None) -> int:
    from omgpt.commands.tune import run_tuning

    p = script_parser(__file__, __doc__)
    p.add_argument("--estimate", action="store_true", help="print the plan and its estimated time; tune nothing")
    p.add_argument(
        "--only",
        type=Text(),
        action="append",
        default=[],
        help="file-name pattern of the settings to re-tune (repeatable)",
    )
    p.add_argument(
        "--folder", type=OutputFolder(), default=None, help="write the re-tuned files here (default: in place)"
    )
    p.add_argument(
        "--source",
        type=InputFolder(),
        default=TUNED,
        help="the tuned files whose settings are re-tuned (default configs/tuned)",
    )
    args = p.parse_args(argv)
    plan = settings(args.source, args.only)
    low = high = 0.0
    for path, data in plan:
        names = [n for n in data["policies"] if n in POLICIES and POLICIES[n][0].tunable]
        times = [estimate(data["policies"][n], n) for n in names]
        low, high = low + sum(t[0] for t in times), high + sum(t[1] for t in times)
        print(
            f"{path.stem}: {', '.join(names)} ({sum(t[0] for t in times) / 60:.1f}-{sum(t[1] for t in times) / 60:.1f} min)"
        )
    print(
        f"{len(plan)} settings: estimated {low / 60:.1f}-{high / 60:.1f} minutes ({low / 3600:.1f}-{high / 3600:.1f} hours) on one core, "
        "from the times the files record (CPU seconds where recorded, else the tuning machine's wall-clock; longer on a shared machine)"
    )
    if args.estimate:
        return 0
    for path, data in plan:
        s = data["policies"]
        names = [n for n in s if n in POLICIES and POLICIES[n][0].tunable]
        runs = max(e["validation"]["runs"] for e in s.values())
        seeds = {e["validation"]["seed"] for e in s.values()}
        if len(seeds) > 1:
            raise OMGPTError(
                f"{path}: its benchmarks were tuned on different validation seeds ({sorted(seeds)}); re-tune it by hand"
            )
        setting = data["setting"]
        run_tuning(
            setting["task"],
            setting["task_options"],
            names,
            setting["horizon"],
            runs,
            seeds.pop(),
            folder=args.folder,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
