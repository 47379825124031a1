"""Checks for chapter 2, A bigram baseline: ``from course_lib.exercises import ch02``."""
from __future__ import annotations

import ast
import inspect
import math
import textwrap

import torch
import torch.nn.functional as F

from ..bigram import BigramLanguageModel, bigram_probs
from . import as_number, call, call_with_hints, expect_close, expect_sequence, fail, passed


def check_initial_loss(fn) -> None:
    """``fn(vocab_size) -> float``: the cross-entropy of a model that gives every one of the
    ``vocab_size`` tokens the same probability."""
    for V in (2, 10, 65, 1000, 50257):
        got = as_number(call(fn, V), f"initial_loss({V})", "return a float")
        expected = math.log(V)
        if math.isclose(got, math.log2(V), rel_tol=1e-4):
            fail(f"initial_loss({V}) = {got:.4f} is log base 2; the loss uses natural logarithms.",
                 "PyTorch's cross-entropy is in nats: use math.log, not math.log2.")
        if math.isclose(got, 1 / V, rel_tol=1e-4):
            fail(f"initial_loss({V}) = {got:.4f} is the probability of the target, not the loss.",
                 "the loss is minus the log of that probability: -ln(1/V).")
        if math.isclose(got, -expected, rel_tol=1e-4):
            fail(f"initial_loss({V}) = {got:.4f} is negative; a cross-entropy never is.",
                 "the loss is MINUS the log-probability of the target: -ln(1/V) = ln V.")
        expect_close(got, expected, f"initial_loss({V})",
                     "a uniform guess gives the target probability 1/V; the loss is -ln of that.")
    # The same number, measured: all-zero logits are a uniform guess.
    V = 65
    measured = F.cross_entropy(torch.zeros(100, V),
                               torch.randint(V, (100,), generator=torch.Generator().manual_seed(0)))
    expect_close(call(fn, V), measured.item(),
                 "initial_loss(65) vs F.cross_entropy of all-zero logits")
    passed(f"initial_loss(V) = ln V; for V = 65 that is {math.log(65):.4f}, what F.cross_entropy "
           "gives for all-zero logits.")


def check_cross_entropy(fn) -> None:
    """``fn(logits, targets) -> scalar tensor``: logits (N, V), targets (N,) ids; the mean over
    the N rows of -log softmax(logits)[target], equal to ``F.cross_entropy``."""
    for N, V, scale, seed in [(5, 3, 1.0, 0), (64, 65, 3.0, 1), (1, 10, 1.0, 2), (32, 7, 0.1, 3)]:
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(N, V, generator=g) * scale
        targets = torch.randint(V, (N,), generator=g)
        got = call(fn, logits.clone(), targets.clone())
        if not isinstance(got, torch.Tensor):
            fail(f"expected a tensor, got {type(got).__name__}.",
                 "return the mean as a 0-d tensor: losses.mean()")
        if got.numel() != 1:
            fail(f"expected a single number (the mean over the {N} rows), got shape "
                 f"{tuple(got.shape)}.",
                 "pick each row's target log-probability, then take .mean() over the rows.")
        got = as_number(got, f"cross-entropy of a ({N}, {V}) batch")  # also catches NaN
        # compared in float64, whatever dtype came back
        got = torch.tensor(got, dtype=torch.float64)
        expected = F.cross_entropy(logits.double(), targets)
        if torch.isclose(got, -expected, rtol=1e-4, atol=1e-5) and expected.abs() > 1e-4:
            fail(f"the loss is negative ({got.item():.4f}); expected {expected.item():.4f}.",
                 "the loss is MINUS the mean log-probability of the targets.")
        wrong_axis = -F.log_softmax(logits.double(), dim=0)[torch.arange(N), targets].mean()
        if N > 1 and torch.isclose(got, wrong_axis, rtol=1e-4, atol=1e-5) \
                and not torch.isclose(wrong_axis, expected, rtol=1e-4, atol=1e-5):
            fail("the softmax runs over the wrong axis (down the rows instead of along each row).",
                 "normalise over the vocabulary, the last dimension: dim=-1.")
        expect_close(got, expected, f"cross-entropy of a ({N}, {V}) batch",
                     "log-probabilities = logits - logsumexp(logits, dim=-1, keepdim=True); then "
                     "-logprobs[torch.arange(N), targets].mean().")
    # Large logits: exp overflows unless the maximum is subtracted first.
    logits = torch.tensor([[1000.0, 0.0, -1000.0], [0.0, 1000.0, 999.0]])
    targets = torch.tensor([0, 2])
    got = call(fn, logits.clone(), targets.clone())
    expected = F.cross_entropy(logits, targets)
    value = (got.detach().double().reshape(-1)[0].item() if isinstance(got, torch.Tensor)
             and got.numel() == 1 else 0.0)
    if not math.isfinite(value):
        fail(f"with logits as large as 1000 your loss is {value} (exp(1000) overflows).",
             "subtract each row's maximum before exponentiating (log-softmax is unchanged by it), "
             "or use torch.logsumexp.")
    expect_close(got, expected, "cross-entropy with logits of +-1000",
                 "subtract each row's maximum before exponentiating, or use torch.logsumexp.")
    passed("your cross-entropy equals F.cross_entropy, and it stays finite for huge logits.")


def check_bigram_probs(fn) -> None:
    """``fn(data, vocab_size, smoothing) -> (V, V)`` table of P(next = j | current = i) from
    the counts of adjacent pairs in the 1-D tensor ``data``, plus ``smoothing`` per entry."""
    cases = [(torch.tensor([0, 1, 1, 2, 0, 1]), 3, 0.0), (torch.tensor([0, 1, 1, 2, 0, 1]), 3, 1.0),
             (torch.randint(5, (300,), generator=torch.Generator().manual_seed(0)), 5, 0.5),
             (torch.randint(20, (2000,), generator=torch.Generator().manual_seed(1)), 20, 1.0)]
    for data, V, smoothing in cases:
        got = call(fn, data.clone(), V, smoothing)
        expected = bigram_probs(data, V, smoothing)
        if not isinstance(got, torch.Tensor):
            fail(f"expected a (V, V) tensor, got {type(got).__name__}.",
                 "return the normalised count table")
        if tuple(got.shape) != (V, V):
            fail(f"with vocab_size={V}, expected shape ({V}, {V}), got {tuple(got.shape)}.",
                 "one row per current token, one column per next token.")
        got = got.double()
        counts = torch.zeros(V, V, dtype=torch.float64)
        for a, b in zip(data[:-1].tolist(), data[1:].tolist()):
            counts[a, b] += 1
        if torch.allclose(got, counts + smoothing) or torch.allclose(got, counts):
            fail("the table holds counts, not probabilities.",
                 "divide each row by its sum: P = N / N.sum(1, keepdim=True).")
        col_norm = (counts + smoothing) / (counts + smoothing).sum(0, keepdim=True)
        if (torch.allclose(got, col_norm, atol=1e-6)
            and not torch.allclose(col_norm, expected.double(), atol=1e-6)):
            fail("the columns sum to 1, not the rows.",
                 "row i is the distribution of the token after i: normalise with sum(dim=1, "
                 "keepdim=True).")
        transposed = (counts.T + smoothing) / (counts.T + smoothing).sum(1, keepdim=True)
        if (torch.allclose(got, transposed, atol=1e-6)
            and not torch.allclose(transposed, expected.double(), atol=1e-6)):
            fail("the table is transposed: entry [i, j] should count j FOLLOWING i.",
                 "count N[data[t], data[t + 1]] += 1 (current token first).")
        if smoothing > 0 and (got == 0).any():
            fail(f"with smoothing={smoothing} some probabilities are 0.",
                 "add `smoothing` to every count before normalising: (N + smoothing).")
        expect_close(got, expected.double(),
                     f"bigram table of {len(data)} tokens, V={V}, smoothing={smoothing}",
                     "N[i, j] = how often j follows i; P = (N + smoothing) / (N + "
                     "smoothing).sum(1, keepdim=True).", atol=1e-6)
    passed("your table equals course_lib.bigram.bigram_probs: every row is a probability "
           "distribution.")


# --- spot the bug: a ReLU on the logits -------------------------------------------------------


def _bigram_cases():
    """(table, idx, targets): tables with many negative entries, as after any training."""
    cases = []
    for V, B, T, seed in [(5, 2, 4, 0), (65, 4, 8, 1), (11, 3, 1, 2), (3, 1, 6, 3)]:
        g = torch.Generator().manual_seed(seed)
        table = 2 * torch.randn(V, V, generator=g)
        idx = torch.randint(V, (B, T), generator=g)
        targets = torch.randint(V, (B, T), generator=g)
        cases.append((table, idx, targets))
    return cases


def _library_forward(table, idx, targets=None):
    """Logits, loss and the loss's gradient on the table, from course_lib's BigramLanguageModel."""
    # the model's random init leaves the notebook's RNG alone
    with torch.random.fork_rng(devices=[]):
        model = BigramLanguageModel(table.shape[0])
    with torch.no_grad():
        model.token_embedding_table.weight.copy_(table)
    logits, loss = model(idx, targets)
    grad = None
    if loss is not None:
        loss.backward()
        grad = model.token_embedding_table.weight.grad
    return logits.detach(), None if loss is None else loss.detach(), grad


def _logits_and_loss(got, name: str, hint: str):
    return expect_sequence(got, 2, f"{name} should return a pair (logits, loss)", hint)


def check_bigram_logits_and_loss(fn) -> None:
    """Spot the bug: ``fn(table, idx, targets) -> (logits, loss)``, the bigram model's forward
    pass: table (V, V) of logits, idx and targets (B, T) ids; logits (B, T, V) are the table's
    rows, as they are (no ReLU), loss the mean cross-entropy, and its gradient reaches the table."""
    name = getattr(fn, "__name__", "your function")
    for table, idx, targets in _bigram_cases():
        V = table.shape[0]
        B, T = idx.shape
        what = f"{name} with V = {V}, idx of shape {(B, T)}"
        leaf = table.clone().requires_grad_()
        logits, loss = _logits_and_loss(call(fn, leaf, idx.clone(), targets.clone()), what,
                                        "return logits, loss")
        expected_logits, expected_loss, expected_grad = _library_forward(table, idx, targets)
        if not isinstance(logits, torch.Tensor) or logits.shape != expected_logits.shape:
            shape = (tuple(logits.shape) if isinstance(logits, torch.Tensor)
                     else type(logits).__name__)
            fail(f"{what}: expected logits of shape {tuple(expected_logits.shape)}, got {shape}.",
                 "look up each id's row of the table: table[idx], (B, T) -> (B, T, V).")
        logits = logits.detach().float()
        rows = table[idx]
        if torch.allclose(logits, F.relu(rows), atol=1e-6) and (rows < 0).any():
            negative = (table[idx.unique()] < 0).float().mean().item()
            fail(f"{what}: your logits are never negative: they equal F.relu(table[idx]), the "
                 f"snippet's bug. {negative:.0%} of the entries of the rows looked up are "
                 "negative; the ReLU sets their logits to 0 and their gradient to 0.",
                 "logits are any real numbers, and the softmax turns them into probabilities. With "
                 "a ReLU a token's probability can only be lowered by raising all the others, and "
                 "an entry that is negative gets no gradient, so it never learns again. Return the "
                 "rows as they are: logits = table[idx], no activation.")
        if torch.allclose(logits, F.softmax(rows, dim=-1), atol=1e-6):
            fail(f"{what}: your logits are probabilities (a softmax of the rows).",
                 "return the raw rows, table[idx]: F.cross_entropy applies the softmax itself.")
        if (logits >= 0).all() and (rows < 0).any():
            fail(f"{what}: your logits are never negative, but the table has negative entries.",
                 "no activation after the lookup: logits = table[idx].")
        expect_close(logits, expected_logits, f"{what}: the logits",
                     "logits[b, t] is row idx[b, t] of the table: table[idx].")
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            fail(f"{what}: expected the loss as a 0-d tensor, got {type(loss).__name__}"
                 + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
                    else "") + ".",
                 "F.cross_entropy(logits.view(B * T, V), targets.view(B * T)) returns the mean as "
                 "a 0-d tensor; keep it a tensor, so that loss.backward() works.")
        expect_close(loss.detach().reshape(()), expected_loss, f"{what}: the loss",
                     "the mean cross-entropy over the B * T positions: "
                     "F.cross_entropy(logits.view(B * T, V), targets.view(B * T)).")
        if not loss.requires_grad:
            fail(f"{what}: the loss has no gradient: it is not computed from the table you were "
                 "given.",
                 "compute the logits from `table` itself (table[idx]), without .detach(), .data or "
                 ".item().")
        try:
            loss.backward()
        except RuntimeError as e:
            fail(f"{what}: loss.backward() on your loss failed: {e}",
                 "return the loss without calling .backward() on it yourself: the check does that.")
        if leaf.grad is None:
            fail(f"{what}: loss.backward() leaves no gradient on the table.",
                 "compute the logits from `table` itself (table[idx]), without .detach() or .data.")
        expect_close(leaf.grad, expected_grad, f"{what}: the gradient of the loss on the table",
                     "the logits must be the table's rows as they are, so that every entry looked "
                     "up gets its gradient.")
    passed("your logits are the table's rows, negative entries included, and the loss and its "
           "gradient equal those of course_lib's BigramLanguageModel.")


# --- spot the bug: `if targets != None` -----------------------------------------------------------


def _none_comparisons(fn) -> list[str] | None:
    """The ``== None`` / ``!= None`` comparisons in ``fn``'s source, or None if it cannot be
    read."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if isinstance(op, (ast.Eq, ast.NotEq)) and any(
                    isinstance(x, ast.Constant) and x.value is None for x in (left, right)):
                found.append(ast.get_source_segment(source, node) or ast.unparse(node))
                break
    return found


_TRUTH_HINT = ("`if targets:` asks for the truth value of a whole tensor, which PyTorch refuses "
               "for more than one element: test whether the argument was given, `if targets is not "
               "None:`.")


def check_bigram_forward(fn) -> None:
    """Spot the bug: ``fn(table, idx, targets=None) -> (logits, loss)``: logits table[idx]
    (B, T, V); loss None when no targets are given, else the mean cross-entropy; and the
    test for a missing argument is ``targets is not None``, never ``!= None``."""
    name = getattr(fn, "__name__", "your function")
    g = torch.Generator().manual_seed(7)
    cases = (_bigram_cases() + [(torch.randn(5, 5, generator=g), torch.tensor([[3]]),
                                 torch.tensor([[0]]))])
    for table, idx, targets in cases:
        V = table.shape[0]
        what = f"{name} with V = {V}, idx of shape {tuple(idx.shape)}"
        expected_logits, expected_loss, _ = _library_forward(table, idx, targets)
        for args, label in [((table.clone(), idx.clone()), "without targets"),
                            ((table.clone(), idx.clone(), None), "with targets=None")]:
            logits, loss = _logits_and_loss(
                call_with_hints(fn, {"ambiguous": _TRUTH_HINT}, *args, context=f"{what} {label}: "),
                f"{what} {label}", "return logits, loss (loss = None without targets)")
            if not isinstance(logits, torch.Tensor) or logits.shape != expected_logits.shape:
                fail(f"{what} {label}: expected logits of shape {tuple(expected_logits.shape)}.",
                     "logits = table[idx], (B, T) -> (B, T, V), with or without targets.")
            expect_close(logits.detach(), expected_logits, f"{what} {label}: the logits",
                         "logits = table[idx].")
            if loss is not None:
                fail(f"{what} {label}: the loss should be None, got {type(loss).__name__}.",
                     "without targets there is nothing to compare with: set loss = None and "
                     "compute the cross-entropy only when `targets is not None`.")
        logits, loss = _logits_and_loss(
            call_with_hints(fn, {"ambiguous": _TRUTH_HINT}, table.clone(), idx.clone(),
                            targets.clone(), context=f"{what} with targets: "),
            f"{what} with targets", "return logits, loss")
        if loss is None:
            fail(f"{what} with targets {targets.tolist()}: the loss is None although targets were "
                 "given.",
                 "a tensor holding the single id 0 is False: `if targets:` skips the loss. "
                 "Test `if targets is not None:`.")
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            fail(f"{what} with targets: expected the loss as a 0-d tensor, got "
                 f"{type(loss).__name__}.",
                 "F.cross_entropy(logits.view(B * T, V), targets.view(B * T)).")
        expect_close(loss.detach().reshape(()), expected_loss, f"{what} with targets: the loss",
                     "F.cross_entropy(logits.view(B * T, V), targets.view(B * T)).")
    comparisons = _none_comparisons(fn)
    if comparisons:
        fail(f"{name} gives the right numbers, but it compares with None by value: "
             f"`{comparisons[0]}`.",
             "write `targets is not None` (or `targets is None`). `!=` asks the object to compare "
             "itself with None: a torch tensor declines (Tensor.__ne__ returns NotImplemented), so "
             "Python falls back to identity and the answer is True by luck; a NumPy array compares "
             "elementwise, and `if` on the array of results raises \"The truth value of an array "
             "with more than one element is ambiguous\". PEP 8: comparisons to None should always "
             "be done with `is` or `is not`.")
    if comparisons is None:
        passed(f"{name} returns no loss without targets and F.cross_entropy with them (its source "
               "could not be read, so the `is not None` test was not checked).")
    else:
        passed(f"{name} returns no loss without targets, F.cross_entropy with them, and tests for "
               "a missing argument with `is`, not `!=`.")


__all__ = ["check_initial_loss", "check_cross_entropy", "check_bigram_probs",
           "check_bigram_logits_and_loss", "check_bigram_forward"]
