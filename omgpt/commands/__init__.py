"""The ``omgpt`` commands: the entry point (:mod:`omgpt.commands.cli`), ``fit`` / ``validate``
(LightningCLI, :mod:`omgpt.commands.lightning_cli`) and every other command as a typed function:
``evaluate``, ``tune``, ``demo``, ``experiment``, ``bench``, ``probe`` / ``tsne`` / ``manipulate``.

The top layer of the package: a command may import the library (``omgpt.*``), the data modules and
callbacks, and the analysis; nothing below imports a command (``tests/test_layers.py``).
"""
