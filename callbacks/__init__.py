"""Lightning callbacks: the horizon curriculum (and, later, self-rollout refresh, embedding probes)."""
from callbacks.curriculum import HorizonCurriculum

__all__ = ["HorizonCurriculum"]
