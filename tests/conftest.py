import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models and rollouts: intra-op threads only add overhead, and stall on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
