"""EmbeddingProbe: linear probes (and a t-SNE grid) of the model's layers every N epochs of a fit."""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from omgpt.analysis.capture import collect
from omgpt.analysis.probing import plot_probes, probe_collected
from omgpt.analysis.tsne import plot_tsne_layers, tsne_layers
from omgpt.errors import OMGPTError
from omgpt.files import write_json
from omgpt.policies import policies_for
from omgpt.seeding import AnalysisPart, check_validation_seed


class EmbeddingProbe(Callback):
    """Every ``every_n_epochs`` training epochs, on global rank 0 only: play ``n_train + n_test`` fresh
    environments with the current model (or ``policy``), capture every layer's embedding at the
    feature token of ``X_step`` (``analysis.capture``), fit the linear probes of ``analysis.probing``
    (demand type / environment parameters / optimal action, whichever the task has), log the
    per-layer held-out errors as ``probe/<target>/layer<k>`` and save ``probe.png``, ``probe.json`` and
    (``tsne=True``) ``tsne.png`` into ``<run folder>/probes/epoch<NNN>/``.

    Distributed runs. The work happens inside ``if trainer.is_global_zero`` and contains no collective
    call: the probe talks to the bare ``pl_module.model`` (not the DDP wrapper, so no gradient hooks or
    buffer broadcasts fire), under ``torch.no_grad``, with its own seeded generators (no global RNG is
    consumed, so the ranks' random streams stay as they would be without the callback), and the
    metrics are logged with ``rank_zero_only=True`` (no ``sync_dist``); the run folder is resolved in
    ``setup`` on every rank, because ``trainer.log_dir`` itself broadcasts. The other ranks therefore do
    not wait here: they run on and block at the first collective they meet (a barrier at the epoch
    boundary, or the next step's gradient all-reduce) until rank 0 catches up. The trade-off: every rank loses the
    probe's wall time once per ``every_n_epochs`` epochs (nothing is computed in parallel), and a probe
    longer than the process group's timeout (30 min by default for NCCL) would kill the job -- keep it
    cheap (the defaults: 256 + 128 histories and a 200-point t-SNE, seconds at CPU scale) and
    ``every_n_epochs`` large. Since only rank 0 logs them, these metrics cannot be ``monitor``-ed by
    checkpointing or early stopping.

    Args:
        every_n_epochs: probe after epochs ``N-1, 2N-1, …`` (0-based), i.e. every ``N`` completed epochs.
        n_train, n_test: histories for fitting and scoring the probes (paper: 1024 / 256).
        step: the 1-based step ``t`` of the probed feature token ``X_t`` (default: the model's horizon).
        policy: who plays the histories (default ``omgpt``, the model itself).
        tsne: also save the t-SNE grid of every layer (coloured by demand type when the task has
            mixed types, by ``a*_t`` otherwise) on the first ``tsne_samples`` test histories.
        seed: seed of the probe environments (the same every time, so epochs compare on equal terms);
            a validation seed, as what a fit looks at while it runs is (docs/protocol.md); a test seed is refused.
    """

    def __init__(
        self,
        every_n_epochs: int = 5,
        n_train: int = 256,
        n_test: int = 128,
        step: int | None = None,
        policy: str = "omgpt",
        tsne: bool = True,
        tsne_samples: int = 200,
        seed: int = 10_000,
    ):
        # Every setting checked here, when the trainer is built: a bad one found by the first probe, epochs
        # into a fit, was a traceback (a seed of -1 reached the seed streams only then).
        if every_n_epochs < 1:
            raise OMGPTError(f"EmbeddingProbe every_n_epochs must be >= 1, got {every_n_epochs}")
        if n_train < 8 or n_test < 4:
            raise OMGPTError(f"EmbeddingProbe needs n_train >= 8 and n_test >= 4, got {n_train} and {n_test}")
        if step is not None and step < 1:
            raise OMGPTError(f"EmbeddingProbe step is a 1-based step of the history, got {step}")
        if tsne and tsne_samples < 4:
            raise OMGPTError(f"EmbeddingProbe tsne_samples must be >= 4, got {tsne_samples}")
        # a probe is looked at while the fit runs, so it plays validation environments, never a test seed's
        check_validation_seed(seed, "EmbeddingProbe seed")
        self.every_n_epochs, self.n_train, self.n_test, self.step = every_n_epochs, n_train, n_test, step
        self.policy, self.tsne, self.tsne_samples, self.seed = policy, tsne, tsne_samples, seed
        self.last: dict | None = None  # the last probe's result (rank 0)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # ``trainer.log_dir`` broadcasts (a collective): ask for it here, where every rank calls it,
        # never inside the rank-0-only branch (that deadlocks DDP -- measured: rank 0 stuck in the
        # broadcast, rank 1 in the next barrier).
        self.root = Path(trainer.log_dir or trainer.default_root_dir)
        # fail at the start, not after the first N epochs (this hook runs before SaveConfigCallback's)
        if not hasattr(pl_module.model, "blocks"):
            raise OMGPTError(
                f"EmbeddingProbe probes the transformer's blocks; the {type(pl_module.model).__name__} backbone "
                f"(model.network.backbone) has none: remove the callback, or probe a transformer"
            )
        if self.policy not in policies_for(pl_module.task):
            raise OMGPTError(
                f"EmbeddingProbe policy {self.policy!r} does not play task {pl_module.task.name!r}; "
                f"policies for it: {', '.join(policies_for(pl_module.task))}"
            )

    def _folder(self, trainer: L.Trainer) -> Path:
        root = getattr(self, "root", None) or Path(trainer.default_root_dir)
        return root / "probes" / f"epoch{trainer.current_epoch:03d}"

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if (trainer.current_epoch + 1) % self.every_n_epochs or trainer.sanity_checking:
            return
        if not trainer.is_global_zero:
            return  # other ranks go on; see the class docstring
        self.probe(trainer, pl_module)

    def probe(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict:

        model, task = pl_module.model, pl_module.task
        step = min(self.step or model.cfg.max_steps, model.cfg.max_steps)
        was_training = model.training
        start = time.perf_counter()
        try:
            with torch.no_grad():
                train = collect(model, task, self.n_train, step, self.policy, self.seed, part=AnalysisPart.PROBE_FIT)
                test = collect(model, task, self.n_test, step, self.policy, self.seed, part=AnalysisPart.PROBE_TEST)
            result = probe_collected(train, test)
        finally:
            model.train(was_training)
        result.update(
            task=task.name,
            step=step,
            policy=self.policy,
            n_train=self.n_train,
            n_test=self.n_test,
            epoch=trainer.current_epoch,
            global_step=trainer.global_step,
        )
        folder = self._folder(trainer)
        plot_probes(result, folder / "probe.png", title=f"Linear probes at X_{step}, epoch {trainer.current_epoch}")
        if self.tsne:
            m = min(self.tsne_samples, self.n_test)
            if test.hidden_type is not None:
                labels, categorical, name, classes = (
                    test.types()[:m],
                    True,
                    test.hidden_type.name,
                    dict(enumerate(test.hidden_type.classes)),
                )
            else:
                labels, categorical, name, classes = test.optimal_action[:m], False, "a*_t", None
            ts = tsne_layers(test.hidden[:, :m], labels, categorical, perplexity=min(30, (m - 1) / 3), seed=self.seed)
            plot_tsne_layers(
                ts, folder / "tsne.png", name, classes, title=f"t-SNE at X_{step}, epoch {trainer.current_epoch}"
            )
            result["tsne_knn"] = ts["knn"]
        result["seconds"] = time.perf_counter() - start
        write_json(result, folder / "probe.json")
        for target, curve in result["errors"].items():
            for layer, err in enumerate(curve):
                pl_module.log(
                    f"probe/{target}/layer{layer}", float(err), rank_zero_only=True, on_step=False, on_epoch=True
                )
        self.last = result
        return result
