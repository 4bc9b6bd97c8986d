"""Checkpoint files: read safely, exported slim, and checked against the model that loads them.

* :func:`read_checkpoint` is the one checkpoint reader: always ``weights_only=True`` (whatever the
  torch version's default), so a checkpoint holds tensors and plain data, never code; every failure is
  an :class:`OMGPTError` (one line). :class:`omgpt.checkpoint_io.SafeCheckpointIO` makes it Lightning's
  reader too, so ``omgpt fit|validate`` resume (``--ckpt_path`` paths and the ``last``/``best``/``hpc``
  aliases alike) through it. It needs no Lightning: :func:`omgpt.load_model` and :class:`omgpt.Agent`
  read checkpoints without importing it.
* :func:`export_weights` writes a checkpoint's weights and hyper-parameters alone (atomically).
* What a checkpoint must be to be resumed, validated or loaded into :class:`~omgpt.module.OMGPTModule`
  (the settings it was trained with, tensors of the right shapes, finite weights), and the one patch of
  Lightning's loop state that makes a step checkpoint resume exactly. The module calls these from
  ``on_load_checkpoint``; :func:`omgpt.module.load_module` from its loader.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from omgpt.errors import OMGPTError
from omgpt.files import atomic_write
from omgpt.settings import GROUPS


def read_checkpoint(path: str | Path, map_location: Any = "cpu", mmap: bool = False) -> dict:
    """A Lightning checkpoint, read with ``weights_only=True`` always: tensors and plain data only, so
    a malicious file cannot run code. Missing, truncated, unsafe or foreign files raise
    :class:`OMGPTError` naming the file."""
    path = str(path)
    if not os.path.isfile(path):
        raise OMGPTError(f"checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL (\S+)", str(e))  # weights_only refused to build this Python object
        if found:
            raise OMGPTError(
                f"refusing to load checkpoint {path}: it would call {found.group(1)}; a checkpoint holds only tensors and plain data"
            ) from None
        raise OMGPTError(f"cannot read checkpoint {path} (UnpicklingError); is the file complete?") from None
    except Exception as e:  # truncated, corrupted, or not a torch file at all
        raise OMGPTError(f"cannot read checkpoint {path} ({type(e).__name__}); is the file complete?") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise OMGPTError(f"{path} is not a Lightning checkpoint (no state_dict)")
    return ckpt


def export_weights(ckpt: str | Path, out: str | Path) -> Path:
    """Weights and hyper-parameters of a Lightning checkpoint, nothing else (no optimizer state, so it
    stays small enough to commit), written atomically to ``out``; ``omgpt evaluate --ckpt`` reads it."""
    full = read_checkpoint(ckpt)
    slim = {
        "state_dict": full["state_dict"],
        "hyper_parameters": full["hyper_parameters"],
        "global_step": full.get("global_step"),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(out, lambda f: torch.save(slim, f))


# --------------------------------------------------------------------------------------------------
# What a checkpoint must be to be resumed, validated or loaded.
def check_resumable(trained: dict, settings: dict, path: str | None = None) -> None:
    """A fit resumed, or a validation run, from a checkpoint must use the model settings it was trained
    with (``trained``: its hyper-parameters as :func:`omgpt.model.checkpoint_hparams` reads them;
    ``settings``: this run's ``model`` arguments): the weights only fit those, and a changed one would
    otherwise be silently replaced by the checkpoint's (LightningCLI copies them over the config) or
    silently ignored. Differences are one :class:`OMGPTError` naming them."""
    name = f"checkpoint {path}" if path else "the checkpoint"
    if trained.get("task") not in (None, settings.get("task")):
        raise OMGPTError(f"{name} was trained on task {trained['task']!r}, not {settings.get('task')!r}")
    unknown = sorted(set(trained) - set(settings))
    if unknown:
        raise OMGPTError(f"{name} has hyper-parameters OMGPTModule does not take: {', '.join(unknown)}")
    changed = changed_settings(trained, settings)
    if changed:
        raise OMGPTError(f"{name} was trained with {changed}; use the settings it was trained with")


def changed_settings(trained: dict, settings: dict, keys=None) -> str:
    """The settings (of ``keys``, default all of ``trained``'s) whose values differ, as
    ``model.network.n_layer=12 (this run: 4), ...`` (three at most); empty when none does."""
    trained, settings = _flat(trained), _flat(settings)
    changed = [k for k in (keys or trained) if k in trained and _comparable(trained[k]) != _comparable(settings.get(k))]
    shown = ", ".join(f"model.{k}={trained[k]!r} (this run: {settings.get(k)!r})" for k in changed[:3])
    return shown + (", ..." if len(changed) > 3 else "")


def _flat(settings: dict) -> dict:
    """The module's arguments with the groups' settings one level up: ``network.n_layer``, ``optim.lr``, ..."""
    out = {k: v for k, v in settings.items() if k not in GROUPS}
    for group in GROUPS:
        out.update({f"{group}.{k}": v for k, v in (settings.get(group) or {}).items()})
    return out


def check_weights(checkpoint: dict, module: torch.nn.Module, path: str | None = None) -> None:
    """The checkpoint's tensors are the ones ``module`` has, of the same shapes."""
    own = {k: v.shape for k, v in module.state_dict().items()}
    theirs = {k: v.shape for k, v in checkpoint["state_dict"].items()}
    wrong = sorted(k for k in own.keys() & theirs.keys() if own[k] != theirs[k]) + sorted(own.keys() ^ theirs.keys())
    if wrong:
        name = f"checkpoint {path}" if path else "the checkpoint"
        raise OMGPTError(
            f"{name}: its weights do not fit the model its settings describe ({wrong[0]}{', ...' if len(wrong) > 1 else ''})"
        )


def _comparable(value):
    """Settings as compared: tuples as lists, an empty mapping as none (``task_options: {}`` = unset)."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()} or None
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    return value


def all_finite(tensors) -> bool:
    """One device sync for all of them."""
    flags = [torch.isfinite(t).all() for t in tensors if t.is_floating_point()]
    return not flags or bool(torch.stack(flags).all())


# --------------------------------------------------------------------------------------------------
# Lightning's loop state on resume.
def resume_after_last_batch(checkpoint: dict) -> None:
    """Make a checkpoint written at the end of an epoch's last training batch (a step checkpoint:
    ``ModelCheckpoint(every_n_train_steps=N)`` at a multiple of N) resume where it was written.

    Lightning (2.6) restores that state as "epoch finished": it skips the epoch's validation and
    end-of-epoch hooks, and it keeps the batch counter unless the next epoch has the same number of
    batches, so a longer next epoch (the mixed phase) would train too few. Marked instead as "batch
    completed, validation about to start" -- the counters it would have a moment later -- the resumed
    fit runs the epoch's validation and epoch end, then the next epoch from its first batch, exactly as
    the uninterrupted run. Called from ``on_load_checkpoint``, before Lightning restores its loops."""
    fit = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    batches, val = fit.get("epoch_loop.batch_progress"), fit.get("epoch_loop.val_loop.batch_progress")
    epochs = fit.get("epoch_progress")
    if batches is None or val is None or epochs is None:
        return
    b, e = batches["total"], epochs["total"]
    at_batch_end = b["ready"] == b["started"] == b["processed"] == b["completed"] + 1
    mid_epoch = e["ready"] == e["started"] == e["processed"] + 1
    if batches["is_last_batch"] and at_batch_end and mid_epoch:
        b["completed"] += 1
        batches["current"]["completed"] += 1
        val["total"].update(ready=1, started=1, processed=0, completed=0)  # "restarted mid-validation"
