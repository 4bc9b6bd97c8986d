"""Model folders: ``pretrained/<name>/`` (or any folder) stands for the ``model.ckpt`` inside it."""
from __future__ import annotations

import torch

from omgpt.module import OMGPTModule, load_module


def test_a_folder_loads_its_model_ckpt(tmp_path):
    torch.manual_seed(0)
    module = OMGPTModule(task="newsvendor", horizon=6, n_layer=1, n_head=2, n_embd=8, layout="compact", pos_encoding="rope")
    folder = tmp_path / "newsvendor"
    folder.mkdir()
    # weights and hyper-parameters only: what a shipped reference model holds
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, folder / "model.ckpt")
    loaded = load_module(str(folder))
    assert loaded.model.cfg.layout == "compact" and loaded.model.cfg.pos_encoding == "rope"
    for (name, a), (_, b) in zip(module.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
