"""tools/same_fits.sh refuses a bad REV or an OUT it did not make in one line and exit 2, before it
deletes anything (it once ran ``rm -rf OUT`` first: a mistyped REV emptied OUT, a file OUT became a
folder). Only the refusals run here: the comparison itself trains twelve fits."""

from __future__ import annotations

import subprocess

import pytest

from omgpt.resources import CHECKOUT

SCRIPT = CHECKOUT / "tools" / "same_fits.sh"


def same_fits(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def refused(run: subprocess.CompletedProcess, says: str) -> bool:
    lines = run.stderr.strip().splitlines()
    return run.returncode == 2 and len(lines) == 1 and lines[0].startswith("same_fits.sh: error:") and says in lines[0]


@pytest.mark.parametrize("marked", [False, True], ids=["someone's-folder", "an-earlier-run's"])
def test_a_bad_rev_is_refused_before_out_is_touched(tmp_path, marked):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.txt").write_text("kept")
    if marked:
        (out / ".same_fits").touch()
    assert refused(same_fits("nosuchrev", str(out)), "REV nosuchrev: not a commit")
    assert (out / "results.txt").read_text() == "kept"


def test_a_file_as_out_is_refused_and_kept(tmp_path):
    out = tmp_path / "out"
    out.write_text("kept")
    assert refused(same_fits("HEAD", str(out)), "not a folder")
    assert out.read_text() == "kept"


def test_a_folder_it_did_not_make_is_refused_with_a_good_rev(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.txt").write_text("kept")
    assert refused(same_fits("HEAD", str(out)), "not made by same_fits.sh")
    assert [p.name for p in out.iterdir()] == ["results.txt"]


def test_no_rev_is_the_usage_in_one_line():
    assert refused(same_fits(), "usage: bash tools/same_fits.sh REV [OUT]")
