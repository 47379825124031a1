"""course_lib.norms: RMSNorm equals torch.nn.RMSNorm, keeps a unit root mean square, the norm of
Llama-style blocks and of QK-norm (chapter 14)."""
import torch
from hypothesis import given, settings, strategies as st

from course_lib.model import RMSNorm as ModelRMSNorm
from course_lib.norms import RMSNorm


def test_model_module_names_the_same_class():
    assert ModelRMSNorm is RMSNorm


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.sampled_from([1e-6, 1e-5, 0.1]), st.integers(0, 1000))
def test_rmsnorm_equals_torch_and_has_unit_rms(size, eps, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, size, generator=g) * 3 + 1
    ours, ref = RMSNorm(size, eps), torch.nn.RMSNorm(size, eps=eps)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-6)
    rms = ours(x).pow(2).mean(-1).sqrt()  # gain 1: root mean square 1, less what eps takes
    assert torch.all(rms <= 1 + 1e-5) and torch.all(rms > 1 - eps / x.pow(2).mean(-1).min() - 1e-4)
