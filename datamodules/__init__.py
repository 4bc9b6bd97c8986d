"""Lightning DataModules that stream generated decision histories."""

from omgpt.datamodules.history import HistoryDataModule, HistoryStream, stream_seed

__all__ = ["HistoryDataModule", "HistoryStream", "stream_seed"]
