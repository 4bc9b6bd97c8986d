"""Evaluation reports and figures, and the interpretability analysis (hidden-state capture, linear
probes, t-SNE, context manipulation); its training-time callback is ``omgpt.callbacks.EmbeddingProbe``.

Analysis sits above the library, the data modules and the callbacks, and below the commands."""
