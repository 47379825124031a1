"""course_lib.induction (chapter 21): the repeat task, the attention-only model and its hook
points, the head scores, ablations and composition scores, training with probes."""
import math

import pytest
import torch
import torch.nn as nn

from course_lib.induction.ablation import (ablate, composition_score, cut_path, head_matrices,
                                           head_means, k_composition, random_composition_baseline)
from course_lib.induction.analysis import (examine, group_losses, offset_attention, path_table,
                                           top_heads)
from course_lib.induction.model import AttnOnlyConfig, AttnOnlyTransformer, token_losses
from course_lib.induction.scores import (all_scores, attention_patterns, duplicate_token_pattern,
                                         head_scores, induction_pattern, previous_token_pattern,
                                         stripe_scores)
from course_lib.induction.task import RepeatTask, batch_fn, repeat_mask, repeat_rows
from course_lib.induction.training import (best_induction_score, crossing_step, induction_trainer,
                                           mean_interval, measure, probe_rows, repeat_loss_rows,
                                           train_config, train_with_probes)


def small_model(seed=0, **changes):
    torch.manual_seed(seed)
    return AttnOnlyTransformer(AttnOnlyConfig(vocab_size=16, block_size=20, n_embd=16, n_head=2,
                                              **changes)).eval()


# --- the task ---


def test_rows_end_with_a_segment_of_distinct_tokens_written_twice():
    task = RepeatTask(vocab_size=32, seq_len=48, min_repeat=8, max_repeat=24)
    rows, lengths = repeat_rows(task, 200, torch.Generator().manual_seed(0))
    assert rows.shape == (200, 48) and rows.dtype == torch.long and lengths.shape == (200,)
    assert lengths.min() >= 8 and lengths.max() <= 24 and len(set(lengths.tolist())) > 10
    assert rows.min() >= 0 and rows.max() < 32
    for row, L in zip(rows, lengths.tolist()):
        first, second = row[48 - 2 * L:48 - L], row[48 - L:]
        assert torch.equal(first, second) and len(set(first.tolist())) == L


def test_the_fixed_offset_control_repeats_at_one_distance():
    task = RepeatTask(vocab_size=32, seq_len=48, min_repeat=16, max_repeat=16)
    rows, lengths = repeat_rows(task, 10, torch.Generator().manual_seed(1))
    assert task.fixed_offset and (lengths == 16).all() and torch.equal(rows[:, 16:32], rows[:, 32:])
    assert not RepeatTask().fixed_offset


def test_the_repeat_mask_marks_the_second_copy_but_its_first_token():
    mask = repeat_mask(torch.tensor([3, 5]), 10)
    # copy at 7, 8, 9: token 7 is unpredictable
    assert mask[0].nonzero().flatten().tolist() == [8, 9]
    assert mask[1].nonzero().flatten().tolist() == [6, 7, 8, 9]


def test_batches_are_inputs_and_next_tokens_and_reproducible():
    fn = batch_fn(RepeatTask(), 4)
    x, y = fn("train", torch.Generator().manual_seed(3))
    x2, _ = fn("train", torch.Generator().manual_seed(3))
    assert x.shape == y.shape == (4, 47) and torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(x, x2)


@pytest.mark.parametrize("settings, phrase", [
    (dict(min_repeat=10, max_repeat=8), "swap them"),
    (dict(seq_len=40, max_repeat=24), "do not fit"),
    (dict(vocab_size=16, max_repeat=20), "distinct tokens"),
    (dict(vocab_size=1), "vocab_size"),
])
def test_bad_tasks_are_refused_in_one_line(settings, phrase):
    with pytest.raises(ValueError, match=phrase):
        RepeatTask(**settings)


# --- the model and its hook points ---


def test_the_model_starts_near_chance_and_its_patterns_are_causal_rows_that_sum_to_one():
    model = small_model()
    idx = torch.randint(0, 16, (3, 20), generator=torch.Generator().manual_seed(0))
    logits, loss = model(idx[:, :-1], idx[:, 1:])
    assert logits.shape == (3, 19, 16) and abs(loss.item() - math.log(16)) < 0.05
    patterns = attention_patterns(model, idx)  # (B, L, nh, T, T)
    assert patterns.shape == (3, 2, 2, 20, 20)
    assert torch.allclose(patterns.sum(-1), torch.ones(3, 2, 2, 20))
    assert (patterns.triu(diagonal=1) == 0).all()
    assert all(not attn.hook_pattern._forward_hooks for attn in model.attn)  # hooks removed


def test_a_hook_that_returns_a_tensor_replaces_the_activation():
    model = small_model()
    idx = torch.randint(0, 16, (2, 20), generator=torch.Generator().manual_seed(1))
    handle = model.attn[0].hook_z.register_forward_hook(lambda m, a, z: torch.zeros_like(z))
    zeroed, _ = model(idx)
    handle.remove()
    with torch.no_grad():
        model.attn[0].c_proj.weight.zero_()  # the same as a layer 0 whose heads write nothing
    expected, _ = model(idx)
    assert torch.allclose(zeroed, expected, atol=1e-6)


def test_token_losses_put_nan_first_and_the_loss_of_each_next_token_after():
    model = small_model()
    rows = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(2))
    losses = token_losses(model, rows)
    assert losses.shape == (2, 12) and losses[:, 0].isnan().all()
    _, loss = model(rows[:, :-1], rows[:, 1:])
    assert torch.allclose(losses[:, 1:].mean(), loss)


def test_bad_model_settings_are_refused():
    with pytest.raises(ValueError, match="multiple of n_head"):
        AttnOnlyConfig(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="longer than block_size"):
        small_model()(torch.zeros(1, 21, dtype=torch.long))


# --- scores ---


def test_detection_patterns_follow_transformer_lens_definitions_on_a_small_example():
    tokens = torch.tensor([[5, 6, 7, 5, 6, 7]])
    assert torch.equal(previous_token_pattern(tokens)[0], torch.diag(torch.ones(5), -1))
    dup = duplicate_token_pattern(tokens)[0]
    assert dup.nonzero().tolist() == [[3, 0], [4, 1], [5, 2]]
    ind = induction_pattern(tokens)[0]
    # the token after the earlier occurrence
    assert ind.nonzero().tolist() == [[3, 1], [4, 2], [5, 3]]


def test_perfect_heads_score_one_and_stripe_scores_agree_on_a_fixed_repeat():
    tokens = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4]])
    T = 8
    prev = previous_token_pattern(tokens)[0].clone()
    prev[0, 0] = 1.0  # query 0 has no previous token: it looks at itself
    ind = induction_pattern(tokens)[0].clone()
    for t in range(T):
        if ind[t].sum() == 0:
            ind[t, t] = 1.0
    patterns = torch.stack([prev, ind])[None, :, None]  # (1, L=2, nh=1, T, T)
    scores = all_scores(patterns, tokens)
    assert scores["previous_token"][0, 0].item() == pytest.approx(7 / 8)  # 7 of 8 queries have one
    # queries 4-7 have an earlier copy
    assert scores["induction"][1, 0].item() == pytest.approx(4 / 8)
    assert stripe_scores(patterns, -1)[0, 0].item() == pytest.approx(1.0)
    # diagonal 1 - n, n = 4: (3, 0) off
    assert stripe_scores(patterns, -3)[1, 0].item() == pytest.approx(4 / 5)


def test_head_scores_refuses_patterns_of_the_wrong_shape():
    with pytest.raises(ValueError, match="layers, heads"):
        head_scores(torch.ones(2, 5, 5), torch.ones(5, 5))


# --- ablation and composition ---


def test_zero_ablation_equals_removing_the_heads_output_columns():
    model = small_model()
    idx = torch.randint(0, 16, (2, 20), generator=torch.Generator().manual_seed(4))
    with ablate(model, 1, 0, "zero"):
        ablated, _ = model(idx)
    assert not model.attn[1].hook_z._forward_hooks  # removed after the block
    with torch.no_grad():
        model.attn[1].c_proj.weight[:, :8] = 0  # head 0's 8 channels of z
    expected, _ = model(idx)
    assert torch.allclose(ablated, expected, atol=1e-6)


def test_mean_ablation_writes_the_mean_and_the_axis_is_the_head():
    model = small_model()
    rows = torch.randint(0, 16, (6, 20), generator=torch.Generator().manual_seed(5))
    means = head_means(model, rows)
    assert [m.shape for m in means] == [(20, 2, 8)] * 2
    seen = []
    with ablate(model, 0, 1, "mean", means):
        handle = model.attn[0].hook_z.register_forward_hook(lambda m, a, z: seen.append(z))
        model(rows)
        handle.remove()
    assert torch.allclose(seen[0][:, :, 1], means[0][:, 1].expand(6, 20, 8))


@pytest.mark.parametrize("args, phrase", [((2, 0), "no head 2.0"), ((0, 5), "no head 0.5"),
                                          ((0, 0, "half"), "how must be"),
                                          ((0, 0, "mean"), "needs the heads")])
def test_bad_ablations_are_refused(args, phrase):
    with pytest.raises(ValueError, match=phrase):
        with ablate(small_model(), *args):
            pass


def qkv_of_layer_1(model, idx):
    """Layer 1's queries, keys and values (B, nh, T, hs) in one forward pass, read at the hook
    points."""
    seen = {}
    attn = model.attn[1]
    handles = [getattr(attn, f"hook_{p}").register_forward_hook(lambda m, a, t,
                                                                p=p: seen.__setitem__(p, t))
               for p in "qkv"]
    logits, _ = model(idx)
    for handle in handles:
        handle.remove()
    return seen, logits


@pytest.mark.parametrize("path", ["q", "k", "v"])
def test_a_path_cut_changes_one_input_of_the_target_heads_only(path):
    model = small_model()
    idx = torch.randint(0, 16, (3, 20), generator=torch.Generator().manual_seed(8))
    full, _ = qkv_of_layer_1(model, idx)
    with ablate(model, 0, 1, "zero"):  # head 0.1 removed from the whole stream
        without, _ = qkv_of_layer_1(model, idx)
    with cut_path(model, (0, [1]), (1, [0]), path, "zero"):
        cut, _ = qkv_of_layer_1(model, idx)
    # all removed
    assert not model.ln[1]._forward_pre_hooks and not model.attn[0].hook_z._forward_hooks
    for p in "qkv":
        expected = without[p][:, 0] if p == path else full[p][:, 0]  # target head 0
        assert torch.allclose(cut[p][:, 0], expected, atol=1e-6), p
        assert torch.equal(cut[p][:, 1], full[p][:, 1])  # head 1.1 is not a target
    # the cut did something
    assert not torch.allclose(without[path][:, 0], full[path][:, 0], atol=1e-4)


def test_path_cuts_nest_each_input_cut_as_if_alone():
    # re-review R-21-M1: the three cuts open together each give their input as when opened alone
    from contextlib import ExitStack
    model = small_model()
    idx = torch.randint(0, 16, (3, 20), generator=torch.Generator().manual_seed(10))
    alone = {}
    for path in "qkv":
        with cut_path(model, (0, [1]), (1, [0]), path, "zero"):
            alone[path] = qkv_of_layer_1(model, idx)[0][path]
    with ExitStack() as stack:
        for path in "qkv":
            stack.enter_context(cut_path(model, (0, [1]), (1, [0]), path, "zero"))
        together, _ = qkv_of_layer_1(model, idx)
    for path in "qkv":
        assert torch.allclose(together[path], alone[path], atol=1e-6), path


def test_a_mean_cut_writes_the_source_heads_mean_and_leaves_the_model_as_it_was():
    model = small_model()
    rows = torch.randint(0, 16, (6, 20), generator=torch.Generator().manual_seed(9))
    means = head_means(model, rows)
    full, logits = qkv_of_layer_1(model, rows)
    with ablate(model, 0, 0, "mean", means):
        averaged, _ = qkv_of_layer_1(model, rows)
    with cut_path(model, (0, [0]), (1, [0, 1]), "k", "mean", means):
        cut, cut_logits = qkv_of_layer_1(model, rows)
        again, _ = qkv_of_layer_1(model, rows)  # a second pass inside the block cuts the same way
    assert torch.allclose(cut["k"], averaged["k"], atol=1e-6) and torch.equal(again["k"], cut["k"])
    assert torch.equal(cut["q"], full["q"]) and not torch.allclose(cut_logits, logits)
    assert torch.equal(qkv_of_layer_1(model, rows)[1], logits)  # nothing left behind


@pytest.mark.parametrize("args, phrase", [
    (((0, [0]), (1, [0]), "o"), "path must be"),
    (((1, [0]), (1, [0]), "k"), "earlier layer to a later"),
    (((0, [0]), (2, [0]), "k"), "earlier layer to a later"),
    (((0, []), (1, [0]), "k"), "need heads"),
    (((0, [0]), (1, [3]), "k"), "need heads"),
    (((0, [0]), (1, [0]), "k", "half"), "how must be"),
    (((0, [0]), (1, [0]), "k", "mean"), "needs the heads"),
])
def test_bad_path_cuts_are_refused(args, phrase):
    with pytest.raises(ValueError, match=phrase):
        with cut_path(small_model(), *args):
            pass


def test_composition_score_is_one_for_aligned_maps_and_zero_for_orthogonal_ones():
    u, v, w, z = torch.eye(4)
    A = torch.outer(u, v)
    assert composition_score(A, torch.outer(v, z)).item() == pytest.approx(1.0)
    assert composition_score(A, torch.outer(w, z)).item() == pytest.approx(0.0)
    assert 0.05 < random_composition_baseline(64, 16, samples=20) < 0.4


def test_head_matrices_reproduce_the_attention_scores_of_a_layer():
    model = small_model(layer_norm=False)
    x = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(6))
    attn = model.attn[0]
    with torch.no_grad():
        nn.init.zeros_(attn.c_attn.bias)
        q, k, _ = attn.c_attn(x).split(16, dim=2)
        scores = q.view(5, 2, 8)[:, 0] @ k.view(5, 2, 8)[:, 0].T  # head 0, (T, T)
    qk = head_matrices(model, 0)["qk"][0]
    assert torch.allclose(x[0] @ qk @ x[0].T, scores, atol=1e-5)
    assert k_composition(model).shape == (2, 2)


# --- training ---


def test_crossing_step_interpolates_and_mean_interval_uses_student_t():
    assert crossing_step([0, 10, 20], [4.0, 3.0, 1.0], 2.0) == pytest.approx(15.0)
    assert crossing_step([0, 10], [4.0, 3.0], 2.0) is None
    mean, low, high = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and high - mean == pytest.approx(4.303 / math.sqrt(3))
    with pytest.raises(ValueError, match="at least 2"):
        mean_interval([1.0])


def test_a_short_run_is_probed_and_reproducible():
    task = RepeatTask(vocab_size=32, seq_len=48)
    rows = probe_rows(task, 32)
    curves = []
    for _ in range(2):
        trainer = induction_trainer(task, train_config(6, seed=3))
        curves.append(train_with_probes(trainer, task, 3, rows))
    assert curves[0] == curves[1] and curves[0]["step"] == [0, 3, 6]
    assert (abs(curves[0]["repeat"][0] - task.chance_loss) < 0.05
            and abs(curves[0]["icl_score"][0]) < 0.05)
    assert curves[0]["induction_score"][0] == best_induction_score(
        induction_trainer(task, train_config(6, 3)).model, rows[0]
    )
    report = examine(trainer.model, task, *rows)
    assert len(report["ablation"]["zero"]) == 2 and len(report["ablation"]["mean"][1]) == 4
    assert "positional" not in report and set(report["paths"]) == {"q", "k", "v"}
    groups = report["groups"]
    assert sorted(groups["top_layer1"]["heads"] + groups["other_layer1"]["heads"]) == [
        [1, h] for h in range(4)
    ]
    assert len(report["paths_to_layer1"]["k"]["per_head"]) == 4
    pairs = report["pairs"]
    assert [p["heads"] for p in pairs] == [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]
    top = groups["top_layer1"]["heads"]
    top_pair = next(p for p in pairs if [[1, h] for h in p["heads"]] == top)
    assert top_pair["ablated"] == groups["top_layer1"]["mean"]["repeat"]
    assert top_pair["key_cut"] == report["paths"]["k"]["layer0"]
    with pytest.raises(ValueError, match="probe_every"):
        train_with_probes(trainer, task, 0, rows)


def test_measure_of_a_uniform_guess_is_chance_everywhere():
    class Uniform(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, idx):
            return torch.zeros(*idx.shape, 32) + self.w, None

    task = RepeatTask(vocab_size=32)
    m = measure(Uniform(), task, *probe_rows(task, 8))
    assert m["repeat"] == pytest.approx(math.log(32)) and m["other"] == pytest.approx(math.log(32))
    assert m["icl_score"] == pytest.approx(0.0, abs=1e-6)


def test_top_heads_split_a_layer_by_its_score():
    assert top_heads(torch.tensor([0.1, 0.4, 0.3, 0.2])) == ([1, 2], [0, 3])
    assert top_heads(torch.tensor([0.5, 0.1])) == ([0], [1])


def test_group_and_path_losses_equal_the_hooks_they_stand_for():
    model, task = small_model(), RepeatTask(vocab_size=16, seq_len=20, min_repeat=4, max_repeat=8)
    rows, lengths = repeat_rows(task, 16, torch.Generator().manual_seed(10))
    means = head_means(model, rows)
    with ablate(model, 0, 0, "mean", means), ablate(model, 1, 1, "mean", means):
        expected = repeat_loss_rows(model, task, rows, lengths).mean().item()
    assert group_losses(model, task, rows, lengths, [(0, 0), (1, 1)], "mean",
                        means)["repeat"][0] == expected
    table = path_table(model, task, rows, lengths, [1], means)
    with cut_path(model, (0, [0]), (1, [1]), "k", "mean", means):
        assert table["k"]["per_head"][0][0] == repeat_loss_rows(model, task, rows,
                                                                lengths).mean().item()
    with cut_path(model, (0, [0, 1]), (1, [1]), "v", "mean", means):
        assert table["v"]["layer0"][0] == repeat_loss_rows(model, task, rows, lengths).mean().item()


def test_offset_attention_reads_one_diagonal_over_the_queries_given():
    patterns = torch.zeros(2, 1, 2, 6, 6)
    patterns[:, 0, 0, torch.arange(3, 6), torch.arange(0, 3)] = 1.0  # head 0 looks 3 back
    assert offset_attention(patterns, 3, torch.arange(3, 6)).tolist() == [[1.0, 0.0]]
    assert offset_attention(patterns, 2, torch.arange(3, 6)).tolist() == [[0.0, 0.0]]


def test_a_fixed_offset_model_gets_the_positional_tests():
    fixed = RepeatTask(vocab_size=16, seq_len=20, min_repeat=6, max_repeat=6)
    variable = RepeatTask(vocab_size=16, seq_len=20, min_repeat=4, max_repeat=8)
    rows, lengths = repeat_rows(fixed, 8, torch.Generator().manual_seed(11))
    report = examine(small_model(), fixed, rows, lengths,
                     transfer=(variable, *probe_rows(variable, 8)))
    positional = report["positional"]
    assert (len(positional["offset_attention"]) == 2
            and abs(positional["transfer"] - math.log(16)) < 0.1)


def test_a_model_too_small_for_the_task_is_refused():
    with pytest.raises(ValueError, match="cannot read the task"):
        induction_trainer(RepeatTask(), train_config(2, 0), AttnOnlyConfig(block_size=20))


# --- the kind of run and its command ---


def test_the_induction_command_trains_resumes_and_refuses_to_change_the_task(tmp_path, capsys):
    from course_lib.cli import main

    out = str(tmp_path / "run")
    assert main(["induction", "--out", out, "--max-iters", "2", "--set", "batch_size=4", "--device",
                 "cpu"]) == 0
    said = capsys.readouterr().out
    assert "repeat length drawn per row (8-24)" in said and "repeat loss" in said
    assert main(["induction", "--out", out, "--resume", "--fixed-offset", "--max-iters", "3",
                 "--device", "cpu"]) == 2
    assert "keeps its task" in capsys.readouterr().err
    assert main(["induction", "--out", out, "--resume", "--max-iters", "3", "--device", "cpu"]) == 0
    assert main(["induction", "--out", str(tmp_path / "f"), "--fixed-offset", "--max-iters", "1",
                 "--set", "batch_size=2", "--device", "cpu"]) == 0
    assert "fixed-offset control (L = 16)" in capsys.readouterr().out


def test_probing_does_not_change_the_run():
    """train_with_probes trains in chunks and measures in between: the weights equal a straight
    run's."""
    task = RepeatTask(vocab_size=32, seq_len=48)
    probed = induction_trainer(task, train_config(6, seed=4, batch_size=4))
    train_with_probes(probed, task, 2, probe_rows(task, 8))
    straight = induction_trainer(task, train_config(6, seed=4, batch_size=4))
    straight.train()
    for a, b in zip(probed.model.state_dict().values(), straight.model.state_dict().values()):
        assert torch.equal(a, b)
