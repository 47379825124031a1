"""The checks of chapter 19's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import math

import numpy as np
import pytest
from exercise_helpers import assert_correct, assert_leaves_rng_alone, assert_not_done, not_done

from course_lib.exercises import ExerciseError, ch19

# --- the FLOPs of a run ---


def run_flops(config, tokens):
    C, L, T, V = config.n_embd, config.n_layer, config.block_size, config.vocab_size
    per_block = 4 * C * C + 2 * 4 * C * C + 2 * C  # attention, MLP (no biases), 2 LayerNorm gains
    N = L * per_block + C + V * C  # + the final LayerNorm, the LM head (the embeddings are lookups)
    return (6 * N + 12 * L * T * C) * tokens


def all_parameters(config, tokens):
    from course_lib.sizing import count_parameters
    return 6 * count_parameters(config) * tokens


def six_nd(config, tokens):
    from course_lib.scaling.isoflop import matmul_parameters
    return 6 * matmul_parameters(config) * tokens


def forward_only(config, tokens):
    return run_flops(config, tokens) / 3


def no_head(config, tokens):
    return run_flops(config, tokens) - 6 * config.vocab_size * config.n_embd * tokens


def with_positions(config, tokens):
    return run_flops(config, tokens) + 6 * config.block_size * config.n_embd * tokens


@pytest.mark.parametrize("right", [run_flops])
def test_run_flops_correct(right, capsys):
    ch19.check_run_flops(right)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch19.check_run_flops, right)


@pytest.mark.parametrize("wrong, message", [(all_parameters, "lookups"), (six_nd, "that is 6ND"),
                                            (forward_only, "forward pass only"),
                                            (no_head, "LM head is missing"),
                                            (with_positions, "position table")])
def test_run_flops_wrong(wrong, message):
    assert_not_done(ch19.check_run_flops, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch19.check_run_flops(wrong)


# --- the IsoFLOP minimum ---


def vertex_in_log_n(N, losses):
    p2, p1, _ = np.polyfit(np.log(N), losses, 2)
    return math.exp(-p1 / (2 * p2))


def best_run(N, losses):
    return N[int(np.argmin(losses))]


def vertex_in_n(N, losses):
    p2, p1, _ = np.polyfit(N, losses, 2)
    return -p1 / (2 * p2)


def log_of_vertex(N, losses):
    return math.log(vertex_in_log_n(N, losses))


def test_isoflop_minimum_correct(capsys):
    ch19.check_isoflop_minimum(vertex_in_log_n)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch19.check_isoflop_minimum, vertex_in_log_n)


@pytest.mark.parametrize("wrong, message",
                         [(best_run, "best run's size"), (vertex_in_n, "against N itself"),
                                            (log_of_vertex, "that is ln N_opt")])
def test_isoflop_minimum_wrong(wrong, message):
    assert_not_done(ch19.check_isoflop_minimum, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch19.check_isoflop_minimum(wrong)


# --- the optimal size from the law ---


def optimal_size(E, A, B, alpha, beta, C):
    G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    return G * (C / 6) ** (beta / (alpha + beta))


def swapped(E, A, B, alpha, beta, C):
    G = (alpha * A / (beta * B)) ** (1 / (alpha + beta))
    return G * (C / 6) ** (alpha / (alpha + beta))


def no_six(E, A, B, alpha, beta, C):
    return optimal_size(E, A, B, alpha, beta, 6 * C)


def test_optimal_size_correct(capsys):
    ch19.check_optimal_size(optimal_size)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch19.check_optimal_size, optimal_size)


@pytest.mark.parametrize("wrong, message", [(swapped, "exponent is swapped"), (no_six, "C / 6")])
def test_optimal_size_wrong(wrong, message):
    assert_not_done(ch19.check_optimal_size, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch19.check_optimal_size(wrong)
