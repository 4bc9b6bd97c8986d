"""The progress line of long work: on a terminal one line per unit done (done/total, elapsed, time
left), and nothing at all when the output is a file or a pipe."""

from __future__ import annotations

import io

import pytest

from omgpt.commands.experiment import Model
from omgpt.commands.experiment import models as experiment_models
from omgpt.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_one_line_per_unit_with_the_time_left(monkeypatch):
    clock = iter([100.0, 110.0, 130.0, 160.0])  # start, then three units ending 10, 30, 60 s in
    monkeypatch.setattr("omgpt.progress.time.perf_counter", lambda: next(clock))
    out = Terminal()
    progress = Progress(3, "models trained", out)
    for _ in range(3):
        progress.advance()
    assert out.getvalue().splitlines() == [
        "[models trained: 1/3, 0:10 elapsed, ~0:20 left]",  # 10 s per unit so far, two left
        "[models trained: 2/3, 0:30 elapsed, ~0:15 left]",
        "[models trained: 3/3, 1:00 elapsed]",
    ]


@pytest.mark.parametrize("stream", [io.StringIO(), None])
def test_output_that_is_not_a_terminal_stays_quiet(stream, capsys):
    progress = Progress(2, "panels evaluated", stream)
    progress.advance()
    progress.advance()
    assert (stream.getvalue() if stream else capsys.readouterr().err) == ""


def test_an_experiments_fits_report_their_progress_on_a_terminal(monkeypatch, tmp_path):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr(experiment_models, "train_model", lambda name, *args, **kwargs: {"name": name})
    models = {name: Model(task="newsvendor", horizon=6) for name in ("a", "b")}
    experiment_models.train_all(models, scale="cpu", models_dir=tmp_path, extra_configs=[], jobs=1)
    lines = terminal.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "[models trained or reused: 1/2",
        "[models trained or reused: 2/2",
    ]
