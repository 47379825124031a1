import os

import matplotlib
import pytest
import torch
from hypothesis import HealthCheck, settings

matplotlib.use("Agg")

# Deterministic property tests: the same examples on every run and machine.
settings.register_profile("course", derandomize=True, deadline=None, max_examples=40,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))


@pytest.fixture
def tiny_config():
    from course_lib.model import GPTConfig

    return GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=16)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
