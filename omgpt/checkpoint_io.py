"""Lightning's checkpoint IO through :func:`omgpt.files.atomic_write` and
:func:`omgpt.checkpoints.read_checkpoint`: ``omgpt fit|validate`` install :class:`SafeCheckpointIO` on their
trainer (:mod:`omgpt.commands.lightning_cli`), so every checkpoint Lightning writes is atomic and every one
it reads is weights-only. A module of its own because it subclasses a Lightning class: what reads a
checkpoint without training (:func:`omgpt.load_model`, :class:`omgpt.Agent`) never imports Lightning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins import TorchCheckpointIO

from omgpt.checkpoints import read_checkpoint
from omgpt.errors import OMGPTError
from omgpt.files import atomic_write


class SafeCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO through :func:`~omgpt.files.atomic_write` and
    :func:`~omgpt.checkpoints.read_checkpoint` (local files)."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        try:
            atomic_write(path, lambda f: torch.save(checkpoint, f))
        except (OSError, RuntimeError) as e:  # a full disk: torch says "PytorchStreamWriter failed writing file"
            reason = (
                e.strerror
                if isinstance(e, OSError) and e.strerror
                else (str(e).strip().splitlines() or [type(e).__name__])[0]
            )
            raise OMGPTError(
                f"cannot save checkpoint {path} (disk full?): {reason}; any earlier {Path(path).name} is unchanged"
            ) from None

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict:
        # weights_only is True whatever the caller asks: no path loads a checkpoint that can run code.
        return read_checkpoint(path, map_location)
