"""The experiment kinds of ``omgpt experiment``, one plug-in per module, each registering a subclass of
:class:`omgpt.commands.experiment.registry.Kind` (every module here is imported by
:func:`~omgpt.commands.experiment.registry.all_kinds`):

* ``curves`` (``curves.py``): the regret comparison (main results, horizon generalisation, distribution
  shift, misspecification, transformer vs LSTM); ``prior-benefit``: the curves, and OMGPT and ``Alg*``
  below the prior-free benchmarks on every panel;
* ``advantage`` (``advantage.py``): the reward improvement rate over the best benchmark on a layers x
  dimension grid; ``model-size``: the same, and its trends across the grid checked;
* ``alg-star-match``: ``TF - Alg*`` along the model's own histories, and the share of the benchmark's
  gap to ``Alg*`` that OMGPT closes;
* ``demand-prediction``: the observation head against ridge regression, and its learning curve;
* ``real-demand``: cost per day on real demand's held-out windows, with ratios to SAA;
* ``beyond-alg-star``: the supervised OMGPT against the same model fine-tuned on regret, ``alg-star`` and
  the best benchmark (paired ratios and differences), and the cost of fine-tuning beside pre-training.
"""
