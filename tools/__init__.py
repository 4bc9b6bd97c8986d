"""Maintenance tools of the repository, run from a checkout as ``python -m tools.NAME`` (not installed):

* ``reference_models``: train, card and re-test the shipped reference models (``pretrained/``);
* ``recipe``: the CPU-recipe study (``results/recipe/``);
* ``readme_tables``: regenerate the tables of the README and ``docs/`` from the JSON in ``results/`` and ``configs/tuned``;
* ``reproduce_experiments``: re-run the committed experiments' evaluation and check every number;
* ``interpretability_train`` / ``interpretability_evidence``: the models and the evidence of
  ``results/interpretability/``.

Tools sit above the commands: they may import anything in ``omgpt``; nothing in ``omgpt`` imports them.
Each tool's ``main(argv)`` runs under the contract of every entry point
(:func:`omgpt.entry.entry_point`): a user's error is one line ``omgpt: error: ...`` on stderr
and exit code 2, found by the tool's parser (:class:`omgpt.entry.ScriptParser`) before it
writes anything; Ctrl-C is one line and exit code 130.
"""
