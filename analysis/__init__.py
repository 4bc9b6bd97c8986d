"""Evaluation reports and plots (and, later, probing, t-SNE and context manipulation)."""
