"""Checks for chapter 7, Training: ``from course_lib.exercises import ch07``."""
from __future__ import annotations

import contextlib
import io
import math

import torch

from ..model import GPT, GPTConfig
from ..optim import cosine_lr
from . import as_number, call, expect_close, fail, passed


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def _reference_loop(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval,
                    zero_before_step: bool = False):
    """The right loop; with ``zero_before_step`` the classic slip backward(); zero_grad(); step(),
    zeroing to 0.0 (set_to_none=False), so that AdamW still decays the weights on every step."""
    for step in range(max_iters):
        if step % eval_interval == 0:
            estimate_loss()
        xb, yb = get_batch("train")
        _, loss = model(xb, yb)
        if not zero_before_step:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if zero_before_step:
            optimizer.zero_grad(set_to_none=False)
        optimizer.step()


_ORDER_HINT = ("the order on every iteration is optimizer.zero_grad(), loss.backward(), "
               "optimizer.step(). Zeroing AFTER backward() throws the gradients away before step() "
               "can use them, so the step moves nothing (or only decays the weights).")


class _Harness:
    """A tiny model, its optimizer, and batch/eval functions that record what the loop does."""

    def __init__(self, seed: int):
        torch.manual_seed(seed)
        self.config = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16)
        self.model = GPT(self.config)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.data = torch.randint(11, (400,), generator=torch.Generator().manual_seed(seed))
        self.generator = torch.Generator().manual_seed(seed + 1)
        self.snapshots = []  # the weights each time a training batch is drawn
        self.eval_calls = 0
        self.splits = []
        # whether every module was in training mode at each forward pass that builds a graph (the
        # training forwards; estimate_loss runs under no_grad). The model has no dropout, so a loop
        # left in eval mode would give the same weights: only this record shows it. The hook sits on
        # the token embedding, which also sees a model.forward(...) call.
        self.train_modes = []
        self.model.wte.register_forward_pre_hook(self._record_mode)

    def _record_mode(self, module, args):
        if torch.is_grad_enabled():
            self.train_modes.append(all(m.training for m in self.model.modules()))

    def get_batch(self, split="train"):
        self.splits.append(split)
        if split == "train":
            self.snapshots.append(_flat(self.model))
        starts = torch.randint(len(self.data) - 9, (4,), generator=self.generator)
        x = torch.stack([self.data[i:i + 8] for i in starts.tolist()])
        y = torch.stack([self.data[i + 1:i + 9] for i in starts.tolist()])
        return x, y

    @torch.no_grad()
    def estimate_loss(self, *args, **kwargs):
        self.eval_calls += 1
        was_training = self.model.training
        self.model.eval()
        g = torch.Generator().manual_seed(0)
        out = {}
        for split in ("train", "val"):
            starts = torch.randint(len(self.data) - 9, (4,), generator=g)
            x = torch.stack([self.data[i:i + 8] for i in starts.tolist()])
            y = torch.stack([self.data[i + 1:i + 9] for i in starts.tolist()])
            out[split] = self.model(x, y)[1].item()
        self.model.train(was_training)
        return out


def check_training_loop(fn) -> None:
    """``fn(model, optimizer, get_batch, estimate_loss, max_iters, eval_interval)``: the fixed
    training loop. Every one of the ``max_iters`` iterations draws a batch with
    ``get_batch("train")``, computes the loss, backpropagates and takes an optimizer step;
    every ``eval_interval`` iterations (starting at 0) it also calls ``estimate_loss()``."""
    for max_iters, eval_interval, seed in [(12, 5, 0), (7, 3, 1), (5, 500, 2)]:
        run = _Harness(seed)
        run.model.train()
        with contextlib.redirect_stdout(io.StringIO()):  # the loop's own progress lines
            call(fn, run.model, run.optimizer, run.get_batch, run.estimate_loss, max_iters,
                 eval_interval,
                 none_ok=True)  # the loop trains in place and need not return anything
        train_batches = run.splits.count("train")
        if train_batches != max_iters:
            fail(f"with max_iters={max_iters} your loop drew {train_batches} training batches with "
                 f"get_batch('train'); expected one per iteration, {max_iters}.",
                 "every iteration draws a fresh batch, computes the loss and takes an optimizer "
                 "step; is that code indented inside the `if iter % eval_interval == 0:` block? "
                 "Only the evaluation and its print belong there.")
        in_eval = run.train_modes.count(False)
        if in_eval:
            fail(f"with max_iters={max_iters} and eval_interval={eval_interval} the model was in "
                 f"eval mode for {in_eval} of its {len(run.train_modes)} training forward passes: "
                 "dropout was off while it trained.",
                 "after an evaluation that calls model.eval(), switch back with model.train() "
                 "before the next training step (estimate_loss() given here restores the mode "
                 "itself, so you need not call model.eval() at all).")
        run.snapshots.append(_flat(run.model))  # the weights after the loop
        changed = sum(not torch.equal(a, b) for a, b in zip(run.snapshots, run.snapshots[1:]))
        if changed == 0:  # not one step moved the weights: it never saw a gradient
            fail(f"with max_iters={max_iters} the weights never changed: optimizer.step() ran on "
                 "no gradients (or never ran).", _ORDER_HINT)
        if changed < max_iters:
            fail(f"with max_iters={max_iters} and eval_interval={eval_interval} the weights "
                 f"changed on only {changed} of {max_iters} iterations: the model learns from "
                 f"{changed} batch(es) only.",
                 "optimizer.step() must run on EVERY iteration. Is it indented inside the "
                 "`if iter % eval_interval == 0:` block? Only the evaluation and its print belong "
                 "there.")
        expected_evals = math.ceil(max_iters / eval_interval)
        # One more evaluation at the end is fine too (nanoGPT's `or iter == max_iters - 1`, or an
        # evaluation after the loop): it reports the final loss and does not change the training.
        if run.eval_calls not in (expected_evals, expected_evals + 1):
            fail(f"with max_iters={max_iters} and eval_interval={eval_interval} estimate_loss() "
                 f"was called {run.eval_calls} times; expected {expected_evals} (at iterations "
                 f"{list(range(0, max_iters, eval_interval))}).",
                 "evaluate when iter % eval_interval == 0, before that iteration's training step "
                 "(and, if you like, once more after the last step).")
        # Same start, same batches: the weights must match a correct loop's exactly.
        ref = _Harness(seed)
        ref.model.train()
        _reference_loop(ref.model, ref.optimizer, ref.get_batch, ref.estimate_loss, max_iters,
                        eval_interval)
        # which mistake? (only then)
        if not torch.allclose(run.snapshots[-1], _flat(ref.model), atol=1e-5):
            slip = _Harness(seed)
            slip.model.train()
            _reference_loop(slip.model, slip.optimizer, slip.get_batch, slip.estimate_loss,
                            max_iters, eval_interval, zero_before_step=True)
            if torch.allclose(run.snapshots[-1], _flat(slip.model), atol=1e-6):
                fail(f"after {max_iters} iterations your weights are those of a loop whose steps "
                     "see zeroed gradients: only AdamW's weight decay moved them.", _ORDER_HINT)
        expect_close(run.snapshots[-1], _flat(ref.model),
                     f"the weights after {max_iters} iterations",
                     "the weights differ from a correct loop's. Call optimizer.zero_grad() before "
                     "loss.backward() on every iteration (otherwise gradients pile up across "
                     "batches), and use the loss of the training batch.", atol=1e-5)
    passed("your loop takes an optimizer step on every batch and evaluates every eval_interval "
           "steps.")


def check_clip_grad_norm(fn) -> None:
    """``fn(parameters, max_norm) -> total_norm``: the global L2 norm of all the gradients (as
    if concatenated into one vector) before clipping; when it exceeds ``max_norm`` every
    gradient is scaled in place by ``max_norm / (total_norm + 1e-6)``. Parameters without a
    gradient are skipped. Must equal ``torch.nn.utils.clip_grad_norm_``."""
    cases = [((3, 4), (4,), (2, 2, 5)), ((10,), (7, 3)), ((64, 32), (32,), (32, 16), (16,))]
    for i, shapes in enumerate(cases):
        for max_norm, scale in [(1.0, 3.0), (0.5, 0.01), (2.0, 1.0)]:
            g = torch.Generator().manual_seed(10 * i + int(scale * 7))
            grads = [torch.randn(*s, generator=g) * scale for s in shapes]
            params = [torch.zeros(*s, requires_grad=True) for s in shapes]
            expected = [torch.zeros(*s, requires_grad=True) for s in shapes]
            for p, q, gr in zip(params, expected, grads):
                p.grad, q.grad = gr.clone(), gr.clone()
            no_grad = torch.zeros(3, requires_grad=True)  # a parameter that got no gradient
            total = torch.nn.utils.clip_grad_norm_(expected, max_norm)
            got = call(fn, params + [no_grad], max_norm)
            true_norm = torch.cat([gr.reshape(-1) for gr in grads]).norm().item()
            got_value = as_number(got, "the returned total norm",
                                  "return the norm you computed before clipping.")
            if true_norm > max_norm and math.isclose(got_value, max_norm, rel_tol=1e-4):
                fail(f"you returned {got_value:.4f}, the norm AFTER clipping; expected the norm "
                     f"before clipping, {true_norm:.4f}.",
                     "compute and keep the total norm first, then scale the gradients, then return "
                     "it.")
            sum_of_norms = sum(gr.norm().item() for gr in grads)
            if len(grads) > 1 and math.isclose(got_value, sum_of_norms, rel_tol=1e-4):
                fail(f"the total norm {got_value:.4f} is the sum of the per-tensor norms; expected "
                     f"{true_norm:.4f}.",
                     "the global norm is sqrt(sum over tensors of norm(g)**2): the norm of all the "
                     "gradients concatenated into one vector.")
            expect_close(got_value, total.item(), f"the total norm of {len(shapes)} gradients",
                         "square every gradient entry, sum over ALL parameters, take the square "
                         "root.")
            if no_grad.grad is not None:
                fail("a parameter without a gradient got one.",
                     "skip parameters whose .grad is None.")
            if true_norm <= max_norm and not all(torch.allclose(p.grad, gr, atol=1e-6, rtol=1e-5)
                                                  for p, gr in zip(params, grads)):
                fail(f"the total norm {true_norm:.4f} is below max_norm={max_norm}, yet the "
                     "gradients changed.",
                     "clipping only ever shrinks: scale by min(1, max_norm / (total + 1e-6)).")
            per_tensor = [gr * min(1.0, max_norm / (gr.norm().item() + 1e-6)) for gr in grads]
            if len(grads) > 1 and all(torch.allclose(a.grad, b, atol=1e-6) for a,
                                      b in zip(params, per_tensor)) \
                    and not all(torch.allclose(a.grad, b.grad, atol=1e-6) for a,
                                b in zip(params, expected)):
                fail("each tensor was clipped on its own, so the gradient's direction changed.",
                     "compute ONE norm over all the gradients and scale them all by the same "
                     "factor.")
            for p, q in zip(params, expected):
                expect_close(p.grad, q.grad,
                             f"the clipped gradient of a {tuple(p.shape)} parameter",
                             "multiply every .grad in place by the same factor, "
                             "min(1, max_norm / (total + 1e-6)).", atol=1e-6)
    passed("your clipping equals torch.nn.utils.clip_grad_norm_: one global norm, one common scale "
           "factor.")


__all__ = ["check_training_loop", "check_clip_grad_norm"]


def _schedule_configs():
    """(max_lr, min_lr, warmup_iters, max_iters): the CPU preset's schedule, a short one, one
    without warmup, and one whose floor is not 10% of the peak."""
    return [(1e-3, 1e-4, 100, 2000), (6e-4, 6e-5, 10, 50), (3e-3, 3e-4, 0, 40), (1.0, 0.25, 7, 31)]


def check_cosine_lr(fn) -> None:
    """``fn(step, max_lr, min_lr, warmup_iters, max_iters) -> float``: the warmup + cosine
    schedule of ``course_lib.optim.cosine_lr``: ``max_lr * (step + 1) / (warmup_iters + 1)``
    during the warmup, then half a cosine from ``max_lr`` at ``warmup_iters`` down to
    ``min_lr`` at ``max_iters``, then ``min_lr``. Compared at every step up to 10 past the end."""
    for max_lr, min_lr, w, S in _schedule_configs():
        where = f"(max_lr={max_lr:g}, min_lr={min_lr:g}, warmup_iters={w}, max_iters={S})"
        steps = range(S + 11)
        expected = [cosine_lr(s, max_lr, min_lr, w, S) for s in steps]
        got = [as_number(call(fn, s, max_lr, min_lr, w, S),
                         f"the learning rate at step {s} {where}",
                         "return the learning rate, a float.") for s in steps]
        close = lambda a, b: math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)  # noqa: E731
        wrong = [s for s in steps if not close(got[s], expected[s])]
        if not wrong:
            continue
        first = wrong[0]
        mismatch = (f"{where}: at step {first} you return {got[first]:.6g}, expected "
                    f"{expected[first]:.6g}")
        if first < w:
            if all(close(got[s], max_lr * s / w) for s in range(w)):
                fail(f"{mismatch}: your warmup starts at 0 (max_lr * step / warmup_iters), so step "
                     "0 takes no step at all.",
                     "count the step from 1 during the warmup: max_lr * (step + 1) / (warmup_iters "
                     "+ 1).")
            if all(close(got[s], max_lr * (s + 1) / w) for s in range(w)):
                fail(f"{mismatch}: your warmup reaches max_lr one step early, at step warmup_iters "
                     "- 1.",
                     "divide by warmup_iters + 1: max_lr * (step + 1) / (warmup_iters + 1), so "
                     "that the peak comes at step warmup_iters, where the cosine starts.")
            fail(f"{mismatch}, during the warmup.",
                 "the warmup is linear: max_lr * (step + 1) / (warmup_iters + 1) for step < "
                 "warmup_iters.")
        if (first <= S
            and all(close(got[s], cosine_lr(s, max_lr, 0.0, w, S)) for s in range(w, S + 1))):
            fail(f"{mismatch}: your cosine decays to 0, not to min_lr.",
                 "the cosine goes from max_lr down to min_lr: "
                 "min_lr + 0.5 * (1 + cos(pi * progress)) * (max_lr - min_lr).")
        if first <= S and all(close(got[s], cosine_lr(s - w, max_lr, min_lr, 0, S))
                              for s in range(w, S + 1)):
            fail(f"{mismatch}: your cosine's progress is (step - warmup_iters) / max_iters, so it "
                 "has not reached min_lr at max_iters.",
                 "the decay lasts max_iters - warmup_iters steps: "
                 "progress = (step - warmup_iters) / (max_iters - warmup_iters).")
        if first > S:
            fail(f"{mismatch}: after max_iters the learning rate should stay at min_lr.",
                 "return min_lr for step > max_iters (a cosine continued past its end climbs back "
                 "up).")
        fail(f"{mismatch}.",
             "after the warmup: min_lr + 0.5 * (1 + cos(pi * progress)) * (max_lr - min_lr), "
             "with progress = (step - warmup_iters) / (max_iters - warmup_iters) going from 0 to "
             "1.")
    passed("your schedule equals course_lib.optim.cosine_lr: a linear warmup to max_lr, half a "
           "cosine down to min_lr at max_iters, then flat.")


__all__.append("check_cosine_lr")
