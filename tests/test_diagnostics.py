"""course_lib.diagnostics: gradient norms module by module (chapter 5)."""
import math

import pytest
import torch
import torch.nn as nn

from course_lib.diagnostics import parameter_gradient_norms


def test_parameter_gradient_norms_match_a_manual_norm():
    layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)])
    x = torch.randn(3, 4)
    for layer in layers:
        x = layer(x)
    x.pow(2).sum().backward()
    norms = parameter_gradient_norms(layers)
    assert len(norms) == 3
    for layer, norm in zip(layers, norms):
        manual = torch.cat([p.grad.flatten() for p in layer.parameters()]).norm().item()
        assert math.isclose(norm, manual, rel_tol=1e-5)


def test_parameter_gradient_norms_zero_without_gradients_and_tiny_values_survive():
    a, b = nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False)
    a.weight.grad = torch.full((3, 3), 1e-25)  # its float32 square underflows to 0
    # sqrt(9 * (1e-25)^2) = 3e-25, computed in float64
    assert parameter_gradient_norms([a, b]) == pytest.approx([3e-25, 0.0], rel=1e-4)
