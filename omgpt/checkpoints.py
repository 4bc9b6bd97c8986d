"""Reading a Lightning checkpoint back into :class:`~omgpt.module.OMGPTModule`: what a checkpoint must be
to be resumed, validated or loaded (the settings it was trained with, tensors of the right shapes, finite
weights), and the one patch of Lightning's loop state that makes a step checkpoint resume exactly.
The module calls these from ``on_load_checkpoint``; :func:`omgpt.module.load_module` from its loader."""
from __future__ import annotations

import torch

from omgpt.errors import OMGPTError


def check_resumable(checkpoint: dict, settings: dict, path: str | None = None) -> None:
    """A fit resumed, or a validation run, from ``checkpoint`` must use the model settings it was
    trained with (``settings``: this run's ``model`` arguments): the weights only fit those, and a
    changed one would otherwise be silently replaced by the checkpoint's (LightningCLI copies them
    over the config) or silently ignored. Differences are one :class:`OMGPTError` naming them."""
    name = f"checkpoint {path}" if path else "the checkpoint"
    trained = {k: v for k, v in (checkpoint.get("hyper_parameters") or {}).items() if not k.startswith("_")}
    if trained.get("task") not in (None, settings.get("task")):
        raise OMGPTError(f"{name} was trained on task {trained['task']!r}, not {settings.get('task')!r}")
    unknown = sorted(set(trained) - set(settings))
    if unknown:
        raise OMGPTError(f"{name} has hyper-parameters OMGPTModule does not take: {', '.join(unknown)}")
    changed = [k for k in trained if _comparable(trained[k]) != _comparable(settings[k])]
    if changed:
        shown = ", ".join(f"model.{k}={trained[k]!r} (this run: {settings[k]!r})" for k in changed[:3])
        raise OMGPTError(f"{name} was trained with {shown}{', ...' if len(changed) > 3 else ''}; use the settings it was trained with")


def check_weights(checkpoint: dict, module: torch.nn.Module, path: str | None = None) -> None:
    """The checkpoint's tensors are the ones ``module`` has, of the same shapes."""
    own = {k: v.shape for k, v in module.state_dict().items()}
    theirs = {k: v.shape for k, v in checkpoint["state_dict"].items()}
    wrong = sorted(k for k in own.keys() & theirs.keys() if own[k] != theirs[k]) + sorted(own.keys() ^ theirs.keys())
    if wrong:
        name = f"checkpoint {path}" if path else "the checkpoint"
        raise OMGPTError(f"{name}: its weights do not fit the model its settings describe ({wrong[0]}{', ...' if len(wrong) > 1 else ''})")


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
