"""Checks for chapter 12, Training at scale: ``from course_lib.exercises import ch12``."""
from __future__ import annotations

import copy
import math

import torch

from ..model import GPT, GPTConfig
from . import as_number, call, describe, expect_tensor, fail, passed

_TINY = GPTConfig(vocab_size=13, block_size=8, n_layer=1, n_head=2, n_embd=16)


def _big_batch_gradients(model, batches) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    model(x, y)[1].backward()
    return [p.grad.clone() for p in model.parameters()]


def _model_with_stale_gradients(model, g: torch.Generator):
    """A copy of ``model`` whose ``.grad`` already holds the gradient of another batch, as after
    an earlier training step; a record of the batch size of every forward call it gets; and the
    order of its forward and backward passes ("forward", "backward"), so that an answer which runs
    every forward pass before one backward pass (all graphs in memory at once) shows."""
    copied = copy.deepcopy(model)
    x, y = torch.randint(0, 13, (2, 8), generator=g), torch.randint(0, 13, (2, 8), generator=g)
    copied(x, y)[1].backward()
    seen, events = [], []

    def record(module, args, kwargs):
        idx = args[0] if args else kwargs.get("input")
        if isinstance(idx, torch.Tensor):
            seen.append(idx.shape[0])
        events.append("forward")

    # on the token embedding, not on the model: GPT.forward calls self.wte(idx) through __call__, so
    # the hook sees every forward pass, also an answer that calls model.forward(x, y) (which skips
    # the model's own hooks)
    copied.wte.register_forward_pre_hook(record, with_kwargs=True)
    # the token embedding takes part in every forward pass, so its gradient is computed once per
    # backward pass
    first = next(copied.parameters())
    assert first is copied.wte.weight, "the backward hook must sit on the token embedding"
    first.register_hook(lambda grad: events.append("backward"))
    return copied, [p.grad.clone() for p in copied.parameters()], seen, events


def _forward_before_backward(events: list[str]) -> int | None:
    """The number (from 2) of the first forward pass that began while an earlier micro-batch had no
    backward pass yet, or None when every forward pass followed the backward pass of the one
    before."""
    forwards = backwards = 0
    for event in events:
        if event == "forward":
            if backwards < forwards:
                return forwards + 1
            forwards += 1
        else:
            backwards += 1
    return None


def check_accumulated_gradients(fn) -> None:
    """``fn(model, batches) -> list of tensors``: the gradient of the mean loss over the
    micro-batches ``batches`` (a list of ``(x, y)`` of equal size), accumulated one micro-batch at
    a time, one tensor per parameter in ``model.parameters()`` order: equal to the gradient of one
    big batch holding all of them. The model comes with gradients from an earlier batch, so a
    loop that never zeroes them fails; and it records the batch size of each forward call, so
    that concatenating the micro-batches shows."""
    torch.manual_seed(12)
    model = GPT(_TINY)
    g = torch.Generator().manual_seed(12)
    for n, B in [(2, 3), (4, 2), (3, 1)]:
        batches = [(torch.randint(0, 13, (B, 8), generator=g),
                    torch.randint(0, 13, (B, 8), generator=g))
                   for _ in range(n)]
        expected = _big_batch_gradients(copy.deepcopy(model), batches)
        handed, stale, seen, events = _model_with_stale_gradients(model, g)
        got = call(fn, handed, [(x.clone(), y.clone()) for x, y in batches])
        what = f"accumulated_gradients over {n} micro-batches of {B}"
        if seen and max(seen) > B:
            fail(f"{what}: your model was called on a batch of {max(seen)} sequences; each "
                 f"micro-batch has {B}.",
                 "do not concatenate the micro-batches: accumulation runs forward and backward on "
                 "ONE micro-batch at a time, so that only one micro-batch's activations are ever "
                 "in memory.")
        early = _forward_before_backward(events)
        if early is not None:
            fail(f"{what}: the forward pass of micro-batch {early} ran before the backward pass of "
                 f"micro-batch {early - 1}. The gradient can come out right, but every "
                 "micro-batch's graph (all its activations) stays in memory until the backward "
                 "pass, so this saves no memory at all.",
                 "call backward() on each micro-batch's loss (divided by their number) inside the "
                 "loop, before the next forward pass; do not collect the losses and sum them for "
                 "one backward() at the end.")
        if not isinstance(got, (list, tuple)) or len(got) != len(expected) or \
                not all(isinstance(t, torch.Tensor) for t in got):
            fail(
                f"{what}: expected a list of {len(expected)} tensors (one per parameter), got "
                f"{type(got).__name__}"
                f"{' of length ' + str(len(got)) if isinstance(got, (list, tuple)) else ''}.",
                "return [p.grad.clone() for p in model.parameters()] after the last backward.",
            )
        for i, (a, b) in enumerate(zip(got, expected)):
            expect_tensor(
                a,
                b.shape,
                f"{what}: gradient {i}",
                "return p.grad.clone() for every parameter.",
                "one gradient per parameter, in model.parameters() order, each shaped like its "
                "parameter.",
                dtype=b.dtype,
                dtype_hint="return the gradients as they are (float32).",
            )
        if all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(got, expected)):
            continue
        if all(torch.allclose(a, b + s, rtol=1e-4, atol=1e-6) for a, b,
               s in zip(got, expected, stale)):
            fail(f"{what}: your gradients include the ones the model already held when you got it.",
                 "zero the gradients once, BEFORE the first micro-batch (model.zero_grad()): "
                 "backward() adds to whatever .grad holds, and a model usually comes with the "
                 "gradients of its last step.")
        if all(torch.allclose(a, n * b, rtol=1e-4, atol=1e-6) for a, b in zip(got, expected)):
            fail(f"{what}: your gradients are {n} times too large.",
                 "backward adds the micro-batches' gradients: divide each micro-batch's loss by "
                 "their number, so that the sum is the gradient of the MEAN loss.")
        last = _big_batch_gradients(copy.deepcopy(model), batches[-1:])
        if any(all(torch.allclose(a, b / d, rtol=1e-4, atol=1e-6) for a, b in zip(got, last))
               for d in (1, n)):
            fail(f"{what}: you returned the gradient of the last micro-batch only.",
                 "zero the gradients once, BEFORE the first micro-batch: zeroing inside the loop "
                 "throws away what the earlier backward passes added.")
        fail(f"{what}: your gradients differ from those of one big batch of {n * B} sequences.",
             "for each micro-batch: loss = model(x, y)[1] / len(batches); loss.backward(). Then "
             "read p.grad.")
    passed("accumulating micro-batch gradients gives exactly the big batch's gradient.")


def check_all_reduce_mean(fn) -> None:
    """``fn(per_process) -> list``: ``per_process[r]`` is process r's list of gradient tensors;
    return what each process holds after an all-reduce average: for every process, a list of
    tensors equal to the mean over processes, and new tensors (each process has its own copy)."""
    g = torch.Generator().manual_seed(3)
    for W, shapes in [(2, [(3,), (2, 2)]), (4, [(5,), (1, 3), (2,)]), (3, [(4, 4)]), (1, [(2,)])]:
        per_process = [[torch.randn(*s, generator=g) for s in shapes] for _ in range(W)]
        inputs = [[t.clone() for t in grads] for grads in per_process]
        expected = [torch.stack([per_process[r][i] for r in range(W)]).mean(0)
                    for i in range(len(shapes))]
        got = call(fn, inputs)
        what = f"all_reduce_mean over {W} processes"
        if not isinstance(got, (list, tuple)) or len(got) != W:
            got_what = (describe(got) if not isinstance(got, (list, tuple))
                        else "a list of length " + str(len(got)))
            fail(
                f"{what}: expected one list of tensors per process ({W} lists), got {got_what}.",
                "after an all-reduce EVERY process holds the result: return [result for each "
                "process].",
            )
        for r, grads in enumerate(got):
            if not isinstance(grads, (list, tuple)) or len(grads) != len(shapes):
                fail(f"{what}: process {r} should hold {len(shapes)} tensors, got "
                     f"{describe(grads)}.",
                     "each process holds a list with one averaged tensor per gradient it sent.")
            for i, t in enumerate(grads):
                expect_tensor(t, expected[i].shape, f"{what}: process {r}, tensor {i}",
                              "each entry is a tensor shaped like the gradient it averages.",
                              dtype=expected[i].dtype,
                              dtype_hint="keep the gradients' dtype (float32).")
                if W > 1 and torch.allclose(t, expected[i] * W, atol=1e-6):
                    fail(f"{what}: process {r} holds the SUM of the gradients, {W} times the mean.",
                         "divide the sum by the number of processes: DDP averages, so that the "
                         "step does not grow with the number of GPUs.")
                if not torch.allclose(t, expected[i], atol=1e-6):
                    fail(f"{what}: process {r}, tensor {i} is not the mean over processes.",
                         "for gradient i: sum per_process[r][i] over every process r, divide by "
                         "their number.")
        ids = [id(t) for grads in got for t in grads]
        if W > 1 and len(set(ids)) != len(ids):
            fail(f"{what}: several processes share one tensor object.",
                 "each process holds its own copy: give each one result.clone().")
    passed("every process ends with the mean gradient: the copies stay identical after the step.")


def _days(n_params, n_tokens, n_gpus, peak_flops, mfu):
    return 6 * n_params * n_tokens / (n_gpus * peak_flops * mfu) / 86400


def check_training_days(fn) -> None:
    """``fn(n_params, n_tokens, n_gpus, peak_flops, mfu) -> float``: days of training for a model
    of ``n_params`` parameters on ``n_tokens`` tokens, at 6·N·D FLOPs, on ``n_gpus`` GPUs of peak
    ``peak_flops`` FLOP/s each, running at model FLOPs utilisation ``mfu`` (e.g. 0.4)."""
    cases = [(124e6, 300e9, 8, 312e12, 0.4), (1.5e9, 30e9, 64, 989e12, 0.35),
             (70e9, 1.4e12, 1024, 312e12, 0.5), (10e6, 1e9, 1, 65e12, 0.3)]
    for case in cases:
        expected = _days(*case)
        got = as_number(call(fn, *case), f"training_days{case}")
        what = (f"training_days(N={case[0]:.3g}, D={case[1]:.3g}, GPUs={case[2]}, "
                f"peak={case[3]:.3g}, mfu={case[4]})")
        if math.isclose(got, expected, rel_tol=1e-6):
            continue
        ratio = got / expected if expected else float("inf")
        hints = [(1 / 3, "you used 2·N·D, the forward pass only: training (forward + backward) "
                         "costs 6·N·D."),
                 (24, "that is hours: divide the seconds by 86,400 for days."),
                 (1440, "that is minutes: divide the seconds by 86,400 for days."),
                 (86400, "that is seconds: divide by 86,400 for days."),
                 (case[4], "the GPUs deliver only mfu x peak: divide by mfu."),
                 (case[4] ** 2, "the GPUs deliver mfu x peak FLOP/s: divide by (peak x mfu), not "
                                "multiply by mfu."),
                 (case[2], "the work is shared by all the GPUs: divide by n_gpus.")]
        # the expected days are not printed: they would give the answer away (a student could return
        # them)
        for factor, hint in hints:
            if math.isclose(ratio, factor, rel_tol=1e-3):
                fail(f"{what}: got {got:.4g} days, which is not the answer.", hint)
        fail(f"{what}: got {got:.4g} days, which is not the answer.",
             "days = 6·N·D / (n_gpus · peak_flops · mfu) / 86,400.")
    passed(f"GPT-2 small on 300B tokens, 8 GPUs of 312 TFLOP/s at 40% MFU: {_days(*cases[0]):.1f} "
           "days.")


__all__ = ["check_accumulated_gradients", "check_all_reduce_mean", "check_training_days"]
