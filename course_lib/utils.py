"""Small helpers every chapter's setup cell uses."""
from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int = 1337) -> None:
    """Seed Python, NumPy and PyTorch (CPU and GPU) so that a chapter reproduces its outputs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA


def pick_device() -> str:
    """'cuda' when a GPU is available (e.g. on Colab), else 'cpu'."""
    return "cuda" if torch.cuda.is_available() else "cpu"
