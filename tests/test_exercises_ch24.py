"""The checks of chapter 24's exercises: right answers pass, the classic wrong ones fail with a
hint."""
import pytest
import torch
from exercise_helpers import assert_correct, assert_not_done, not_done

from course_lib.exercises import ExerciseError, ch24


def delta_write(S, k, v, beta):
    k = k / k.norm(dim=-1, keepdim=True)
    error = v - torch.einsum("bhkv,bhk->bhv", S, k)
    return S + k[..., None] * (beta[..., None] * error)[..., None, :]


def no_l2_norm(S, k, v, beta):  # the wrong answer the chapter warns about
    error = v - torch.einsum("bhkv,bhk->bhv", S, k)
    return S + k[..., None] * (beta[..., None] * error)[..., None, :]


def plain_add(S, k, v, beta):
    k = k / k.norm(dim=-1, keepdim=True)
    return S + k[..., None] * (beta[..., None] * v)[..., None, :]


def test_delta_write(capsys):
    ch24.check_delta_write(delta_write)
    assert_correct(capsys)


@pytest.mark.parametrize("wrong,phrase", [(no_l2_norm, "raw key"), (plain_add, "linear attention")])
def test_delta_write_refuses(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch24.check_delta_write(wrong)


def gated_step(S, q, k, v, g, beta):
    S = S * g.exp()[..., None, None]
    error = v - (S * k[..., None]).sum(-2)
    S = S + k[..., None] * (beta[..., None] * error)[..., None, :]
    return (S * q[..., None]).sum(-2), S


def decay_after_write(S, q, k, v, g, beta):
    error = v - (S * k[..., None]).sum(-2)
    S = (S + k[..., None] * (beta[..., None] * error)[..., None, :]) * g.exp()[..., None, None]
    return (S * q[..., None]).sum(-2), S


def no_decay(S, q, k, v, g, beta):
    return gated_step(S, q, k, v, torch.zeros_like(g), beta)


def read_before_write(S, q, k, v, g, beta):
    o, S_new = gated_step(S, q, k, v, g, beta)
    return ((S * g.exp()[..., None, None]) * q[..., None]).sum(-2), S_new


def test_gated_step(capsys):
    ch24.check_gated_step(gated_step)
    assert_correct(capsys)


@pytest.mark.parametrize("wrong,phrase",
                         [(decay_after_write, "after the write"), (no_decay, "never decays"),
                                          (read_before_write, "o: values differ")])
def test_gated_step_refuses(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch24.check_gated_step(wrong)


def chunk_decay(g):
    cum = g.cumsum(-1)
    D = (cum[:, None] - cum[None, :]).exp()
    return D * torch.ones_like(D).tril()


def chunk_decay_masked(g):  # the same with -inf before exp, as the library writes it
    cum = g.cumsum(-1)
    C = len(g)
    return (cum[:, None] - cum[None, :]).masked_fill(torch.ones(C, C, dtype=torch.bool).triu(1),
                                                     float("-inf")).exp()


def strict(g):  # the chunk boundary off by one: the token's own write left out
    return chunk_decay(g) * torch.ones(len(g), len(g)).tril(-1)


def shifted(g):  # off by one the other way: the decay of position i applied to its own write
    cum = g.cumsum(-1)
    return (cum[:, None] - cum[None, :] + g[None, :]).exp() * torch.ones(len(g), len(g)).tril()


def transposed(g):
    return chunk_decay(g).T


@pytest.mark.parametrize("right", [chunk_decay, chunk_decay_masked])
def test_chunk_decay(right, capsys):
    ch24.check_chunk_decay(right)
    assert_correct(capsys)


@pytest.mark.parametrize("wrong,phrase", [(strict, "diagonal is 0"), (shifted, "off by one"),
                                          (transposed, "transposed")])
def test_chunk_decay_refuses(wrong, phrase):
    with pytest.raises(ExerciseError, match=phrase):
        ch24.check_chunk_decay(wrong)


@pytest.mark.parametrize("check",
                         [ch24.check_delta_write, ch24.check_gated_step, ch24.check_chunk_decay])
def test_not_done(check):
    assert_not_done(check, not_done)
