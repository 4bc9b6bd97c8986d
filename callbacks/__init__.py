"""Lightning callbacks: the horizon curriculum, Algorithm 1's self-rollout refresh, and Lightning's
ModelCheckpoint with ``last.ckpt`` at every validation. (The probing callback, which runs the analysis,
is ``omgpt.analysis.embedding_probe.EmbeddingProbe``: it sits above.)"""

from omgpt.callbacks.checkpoint import ModelCheckpoint
from omgpt.callbacks.curriculum import HorizonCurriculum
from omgpt.callbacks.self_rollout import SelfRolloutRefresh

__all__ = ["HorizonCurriculum", "ModelCheckpoint", "SelfRolloutRefresh"]
