"""Maintenance tools of the repository, run from a checkout as ``python -m tools.NAME`` (not installed):

* ``reference_models``: train, card and re-test the shipped reference models (``pretrained/``);
* ``recipe``: the CPU-recipe study (``results/recipe/``);
* ``readme_tables``: regenerate the README's tables from the JSON in ``results/`` and ``configs/tuned``;
* ``interpretability_train`` / ``interpretability_evidence``: the models and the evidence of
  ``results/interpretability/``.

Tools sit above the commands: they may import anything in ``omgpt``; nothing in ``omgpt`` imports them.
"""
