"""The checks of chapter 7's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import pytest
import torch

from course_lib.exercises import ExerciseError, ch07
from exercise_helpers import assert_correct, assert_not_done, not_done


# --- spot the bug: the training loop ---


def fixed_loop(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    for iter in range(max_iters):
        if iter % eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        xb, yb = get_batch("train")
        logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def buggy_loop(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    # the tutorial's bug: the optimizer step is indented inside the evaluation `if`
    for iter in range(max_iters):
        xb, yb = get_batch("train")
        logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if iter % eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            optimizer.step()


def buggy_whole_step_inside_if(model, optimizer, get_batch, estimate_loss, max_iters,
                               eval_interval):
    for iter in range(max_iters):
        if iter % eval_interval == 0:
            estimate_loss()
            xb, yb = get_batch("train")
            logits, loss = model(xb, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


def no_zero_grad(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    for iter in range(max_iters):
        if iter % eval_interval == 0:
            estimate_loss()
        xb, yb = get_batch("train")
        logits, loss = model(xb, yb)
        loss.backward()
        optimizer.step()


def never_evaluates(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    for iter in range(max_iters):
        xb, yb = get_batch("train")
        logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def test_training_loop_correct(capsys):
    ch07.check_training_loop(fixed_loop)
    out = capsys.readouterr().out
    assert "Correct!" in out and "step 0" not in out  # the loop's own prints are swallowed


def test_training_loop_not_done():
    assert_not_done(ch07.check_training_loop, not_done)


@pytest.mark.parametrize("wrong, message", [
    (buggy_loop, "weights changed on only 3 of 12 iterations"),
    (no_zero_grad, "zero_grad"),
    (never_evaluates, "estimate_loss"),
])
def test_training_loop_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch07.check_training_loop(wrong)


def test_training_loop_bug_hint_names_the_if():
    with pytest.raises(ExerciseError, match="indented inside") as info:
        ch07.check_training_loop(buggy_whole_step_inside_if)
    assert "training batches" in str(info.value) or "weights changed" in str(info.value)


# --- gradient clipping ---


def clip_grad_norm(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    scale = min(1.0, max_norm / (total.item() + 1e-6))
    for g in grads:
        g.mul_(scale)
    return total


def test_clip_grad_norm_correct(capsys):
    ch07.check_clip_grad_norm(clip_grad_norm)
    assert_correct(capsys)


def test_clip_grad_norm_torch_passes(capsys):
    ch07.check_clip_grad_norm(lambda ps, m: torch.nn.utils.clip_grad_norm_(ps, m))
    assert_correct(capsys)


def test_clip_grad_norm_not_done():
    assert_not_done(ch07.check_clip_grad_norm, not_done)


def per_tensor(parameters, max_norm):
    norms = []
    for p in parameters:
        if p.grad is not None:
            n = p.grad.norm()
            p.grad.mul_(min(1.0, max_norm / (n.item() + 1e-6)))
            norms.append(n)
    return torch.sqrt(sum(n ** 2 for n in norms))


def returns_norm_after(parameters, max_norm):
    clip_grad_norm(parameters, max_norm)
    return torch.sqrt(sum((p.grad ** 2).sum() for p in parameters if p.grad is not None))


def sum_of_norms(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = sum(g.norm() for g in grads)
    for g in grads:
        g.mul_(min(1.0, max_norm / (total.item() + 1e-6)))
    return total


def always_rescales(parameters, max_norm):
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    for g in grads:
        g.mul_(max_norm / (total.item() + 1e-6))
    return total


def crashes_on_missing_grad(parameters, max_norm):
    total = torch.sqrt(sum((p.grad ** 2).sum() for p in parameters))
    return total


@pytest.mark.parametrize("wrong, message", [
    (per_tensor, "clipped on its own"),
    (returns_norm_after, "AFTER clipping"),
    (sum_of_norms, "sum of the per-tensor norms"),
    (always_rescales, "below max_norm"),
    (crashes_on_missing_grad, "raised TypeError"),
])
def test_clip_grad_norm_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch07.check_clip_grad_norm(wrong)


def karpathy_loop(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    # nanoGPT / the lecture: also evaluate at the last iteration
    for iter in range(max_iters):
        if iter % eval_interval == 0 or iter == max_iters - 1:
            estimate_loss()
        xb, yb = get_batch("train")
        _, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def eval_after_loop(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    fixed_loop(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval)
    estimate_loss()  # the final loss, after the last step


def eval_every_step(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    for iter in range(max_iters):
        estimate_loss()
        xb, yb = get_batch("train")
        _, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize("loop", [karpathy_loop, eval_after_loop])
def test_training_loop_accepts_an_evaluation_after_the_last_step(loop, capsys):
    ch07.check_training_loop(loop)
    assert "Correct" in capsys.readouterr().out


# 07-m2 (review 2026-11-28): the harness model has no dropout, so a loop left in eval mode gave the
# same weights and passed. The check now records the mode of every training forward pass.


def left_in_eval_mode(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    for step in range(max_iters):
        if step % eval_interval == 0:
            model.eval()
            estimate_loss()
        xb, yb = get_batch("train")
        _, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def eval_then_train(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
    for step in range(max_iters):
        if step % eval_interval == 0:
            model.eval()
            estimate_loss()
            model.train()
        xb, yb = get_batch("train")
        _, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def test_training_loop_left_in_eval_mode_fails():
    with pytest.raises(ExerciseError,
                       match="(?s)in eval mode for 12 of its 12 training forward passes.*"
                                            "Hint: .*switch back with model.train\\(\\)"):
        ch07.check_training_loop(left_in_eval_mode)


def test_training_loop_eval_then_train_passes(capsys):
    ch07.check_training_loop(eval_then_train)
    assert "Correct!" in capsys.readouterr().out


def test_training_loop_rejects_evaluating_every_step():
    with pytest.raises(AssertionError, match="estimate_loss"):
        ch07.check_training_loop(eval_every_step)


def _zero_after_backward(set_to_none):
    def loop(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval):
        for iter in range(max_iters):
            if iter % eval_interval == 0:
                estimate_loss()
            xb, yb = get_batch("train")
            logits, loss = model(xb, yb)
            loss.backward()
            optimizer.zero_grad(set_to_none=set_to_none)  # the slip: the gradients are gone ...
            optimizer.step()  # ... before the step reads them
    return loop


@pytest.mark.parametrize("set_to_none", [True, False])
def test_training_loop_zeroing_after_backward_gets_the_order_hint(set_to_none):
    # Issue 22: backward(); zero_grad(); step() was answered "is optimizer.step() indented inside
    # the if block?". With set_to_none=True (the default) no step moves the weights; with
    # set_to_none=False AdamW's weight decay still moves them, on every step.
    with pytest.raises(ExerciseError,
                       match="(?s)zero_grad\\(\\), loss.backward\\(\\), optimizer.step\\(\\)"):
        ch07.check_training_loop(_zero_after_backward(set_to_none))


# --- the warmup + cosine schedule ---


def warmup_cosine(step, max_lr, min_lr, warmup_iters, max_iters):
    # written differently from the chapter's solution: (1 + cos x) / 2 = cos(x / 2) ** 2,
    # and the flat tail as a clamped progress
    import math
    if step < warmup_iters:
        return max_lr * (step + 1) / (warmup_iters + 1)
    progress = min(1.0, (step - warmup_iters) / max(1, max_iters - warmup_iters))
    return min_lr + (max_lr - min_lr) * math.cos(math.pi * progress / 2) ** 2


def test_cosine_lr_correct(capsys):
    ch07.check_cosine_lr(warmup_cosine)
    assert_correct(capsys)


def test_cosine_lr_library_passes(capsys):
    from course_lib.optim import cosine_lr
    ch07.check_cosine_lr(cosine_lr)
    assert_correct(capsys)


def test_cosine_lr_not_done():
    assert_not_done(ch07.check_cosine_lr, not_done)


def _with(warmup=None, after=None):
    """The correct schedule with one part replaced: warmup(step, max_lr, w) during the warmup,
    after(step, max_lr, min_lr, w, S) from warmup_iters on."""
    def schedule(step, max_lr, min_lr, w, S):
        if step < w and warmup is not None:
            return warmup(step, max_lr, w)
        if step >= w and after is not None:
            return after(step, max_lr, min_lr, w, S)
        return warmup_cosine(step, max_lr, min_lr, w, S)
    return schedule


def _cosine(step, max_lr, min_lr, w, S, total=None):
    import math
    progress = (step - w) / (total if total is not None else S - w)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (max_lr - min_lr)


@pytest.mark.parametrize("wrong, message", [
    (_with(warmup=lambda s, lr, w: lr * s / w), "starts at 0"),
    (_with(warmup=lambda s, lr, w: lr * (s + 1) / w), "one step early"),
    (_with(after=lambda s, lr, lo, w, S: warmup_cosine(s, lr, 0.0, w, S)), "decays to 0"),
    (_with(after=lambda s, lr, lo, w, S: _cosine(min(s, S), lr, lo, w, S, total=S)), "progress"),
    # no flat tail
    (_with(after=lambda s, lr, lo, w, S: _cosine(s, lr, lo, w, S)), "stay at min_lr"),
    (_with(warmup=lambda s, lr, w: lr), "during the warmup"),  # no warmup at all
    (lambda s, lr, lo, w, S: "fast", "expected a number"),
    (lambda s, lr, lo, w, S: None, "returned None"),
])
def test_cosine_lr_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch07.check_cosine_lr(wrong)
