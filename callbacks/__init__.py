"""Lightning callbacks: Lightning's ModelCheckpoint with ``last.ckpt`` at every validation. (Algorithm 1's
horizon curriculum and mixed phase are the datamodule's schedule, :mod:`omgpt.datamodules.algorithm1`;
the probing callback, which runs the analysis, is ``omgpt.analysis.embedding_probe.EmbeddingProbe``: it
sits above.)"""

from omgpt.callbacks.checkpoint import ModelCheckpoint

__all__ = ["ModelCheckpoint"]
