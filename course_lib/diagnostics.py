"""What the chapters measure inside a network while it learns: gradient norms layer by layer
(chapter 5's residual connections as a gradient highway)."""
from __future__ import annotations

import math


def parameter_gradient_norms(modules) -> list[float]:
    """After a backward pass: the L2 norm of the gradients of all parameters of each module in
    ``modules`` (e.g. the blocks of a stack, input side first), one float per module.

    Parameters without a gradient count as zero. Squares are summed in float64, so gradients as
    small as 1e-30 (whose float32 squares would underflow) are still measured.
    """
    norms = []
    for module in modules:
        total = 0.0
        for p in module.parameters():
            if p.grad is not None:
                total += p.grad.detach().double().pow(2).sum().item()
        norms.append(math.sqrt(total))
    return norms
