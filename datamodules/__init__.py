"""Lightning DataModules that stream generated decision histories, on Algorithm 1's schedule."""

from omgpt.datamodules.algorithm1 import Algorithm1Schedule, HorizonCurriculum, MixedPhase
from omgpt.datamodules.history import HistoryDataModule, HistoryStream, stream_seed

__all__ = ["Algorithm1Schedule", "HistoryDataModule", "HistoryStream", "HorizonCurriculum", "MixedPhase", "stream_seed"]
