import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models and rollouts: intra-op threads only add overhead, and stall on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_collection_modifyitems(config, items):
    """The ``fuzz`` sweep (minutes) runs only when ``-m`` names it (``pytest -m fuzz``); every other run,
    CI's included, runs its seeded sample instead (tests/test_fuzz.py)."""
    if "fuzz" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("fuzz") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("fuzz") is not None])
        items[:] = kept
