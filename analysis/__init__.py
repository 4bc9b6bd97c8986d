"""Evaluation reports and figures, and the interpretability analysis (hidden-state capture, linear
probes, t-SNE, context manipulation) with its training-time callback ``EmbeddingProbe``.

Analysis sits above the library, the data modules and the callbacks, and below the commands."""
