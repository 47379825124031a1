"""Per-operation fingerprints: which CPU kernel makes this host compute other last bits than the
host that stored the chapters' outputs.

Why. The pin of :mod:`course_lib.tools.numerics` makes one host compute the same bits whatever its
thread count or exports, but it cannot make two CPU vendors agree: measured on a 2-core Intel Xeon
with AVX-512 and AMX against the 2-core AMD EPYC the chapters were first stored on, under the same
pin and torch 2.13.0, MKL's matrix products and vector maths (exp, AdamW), oneDNN and
scaled-dot-product attention gave other last bits, and no setting of ``MKL_CBWR`` or
``ONEDNN_MAX_CPU_ISA`` made the two agree on every chapter. So a host is compared with the
reference, kernel by kernel: each operation a chapter's training uses is run on fixed seeded inputs,
forward and backward, and summarised by a SHA-256 prefix of its result; plus a short training
(:func:`course_lib.tools.numerics.fingerprint`) to catch any kernel the list misses.

``make test`` computes this host's fingerprints in its first seconds (book/conftest.py) and
compares them with :data:`REFERENCE_RECORD`, the fingerprints of the host that stored the outputs:
equal, and nbval compares every stored output bitwise; different, and it names the kernels that
differ and compares each printed number within the tolerance its chapter declares
(:mod:`course_lib.tools.tolerant_outputs`).

The operations, their order and their random draws are those of the project's per-host tool
(``shared/tools/op_fingerprints.py``), so the record here can be compared with its JSON files.
Shapes are the CPU preset's (B=12, T=64, C=128, 4 heads, V=65), chapter 4's model's, and a few
odd sizes that change a GEMM's blocking.
"""
from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path

from .numerics import fingerprint, reference_environment

REFERENCE_RECORD = Path(__file__).resolve().parent.parent / "records" / "numerics_reference.json"

# (rows, inner, columns) of the linear layers: the preset's projections and head, chapter 4's, odd
# sizes
LINEAR_SHAPES = [(768, 128, 128), (768, 128, 512), (768, 512, 128), (768, 128, 65), (768, 128, 384),
                 (32 * 8, 16, 16), (100, 37, 53), (1, 128, 65), (4096, 64, 64)]


def _digest(*tensors) -> str:
    """A SHA-256 prefix of the tensors' bytes (float32; other dtypes converted to it)."""
    import torch

    h = hashlib.sha256()
    for t in tensors:
        if t is not None:
            t = t.detach().contiguous()
            h.update((t if t.dtype == torch.float32 else t.float()).numpy().tobytes())
    return h.hexdigest()[:16]


def operation_fingerprints() -> dict[str, str]:
    """Each operation's name -> the digest of its result (and of its gradients, for "bwd"),
    computed in this process (call it under the pin: see :func:`host_fingerprints`)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    out = {}
    for m, k, n in LINEAR_SHAPES:
        a, w, b = randn(m, k).requires_grad_(), randn(n,
                                                      k).requires_grad_(), randn(n).requires_grad_()
        y = F.linear(a, w, b)
        y.square().sum().backward()
        out[f"linear {m}x{k}x{n} fwd"] = _digest(y)
        out[f"linear {m}x{k}x{n} bwd"] = _digest(a.grad, w.grad, b.grad)
    x = randn(12, 64, 128)
    out["bmm 12x64x128 @ 12x128x64"] = _digest(x @ x.transpose(1, 2))
    for causal in (True, False):
        q, k, v = (randn(12, 4, 64, 32).requires_grad_() for _ in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        y.square().sum().backward()
        out[f"sdpa causal={causal} fwd"] = _digest(y)
        out[f"sdpa causal={causal} bwd"] = _digest(q.grad, k.grad, v.grad)
    # chapter 4's attention by hand
    q, k, v = (randn(12, 4, 64, 32).requires_grad_() for _ in range(3))
    att = (q @ k.transpose(-2, -1)) * 32 ** -0.5
    att = att.masked_fill(torch.triu(torch.ones(64, 64, dtype=torch.bool), 1),
                          float("-inf")).softmax(-1)
    y = att @ v
    y.square().sum().backward()
    out["manual attention fwd"], out["manual attention bwd"] = _digest(y), _digest(q.grad, k.grad,
                                                                                   v.grad)
    x, w, b = randn(12, 64,
                    128).requires_grad_(), randn(128).requires_grad_(), randn(128).requires_grad_()
    y = F.layer_norm(x, (128,), w, b)
    y.square().sum().backward()
    out["layer_norm fwd"], out["layer_norm bwd"] = _digest(y), _digest(x.grad, w.grad, b.grad)
    x = randn(12, 64, 512).requires_grad_()
    elementwise = [("gelu", F.gelu), ("gelu tanh", lambda t: F.gelu(t, approximate="tanh")),
                   ("relu", F.relu), ("silu", F.silu), ("softmax", lambda t: t.softmax(-1)),
                   ("exp", torch.exp), ("tanh", torch.tanh)]
    for name, fn in elementwise:
        x.grad = None
        y = fn(x)
        y.square().sum().backward()
        out[f"{name} fwd"], out[f"{name} bwd"] = _digest(y), _digest(x.grad)
    logits, targets = randn(768, 65).requires_grad_(), torch.randint(0, 65, (768,), generator=g)
    loss = F.cross_entropy(logits, targets)
    loss.backward()
    out["cross_entropy fwd"], out["cross_entropy bwd"] = _digest(loss), _digest(logits.grad)
    emb, idx = torch.nn.Embedding(65, 128), torch.randint(0, 65, (12, 64), generator=g)
    emb(idx).square().sum().backward()
    out["embedding bwd"] = _digest(emb.weight.grad)
    out["sum 1e6"] = _digest(randn(1_000_000).sum())
    out["mean dim"] = _digest(randn(768, 512).mean(-1))
    out["norm"] = _digest(torch.linalg.vector_norm(randn(100_000)))
    # AdamW's three implementations
    for foreach, fused in [(False, False), (True, False), (False, True)]:
        torch.manual_seed(0)
        params = ([torch.nn.Parameter(randn(128, 128))
                   for _ in range(3)] + [torch.nn.Parameter(randn(65))])
        optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1, foreach=foreach,
                                      fused=fused)
        for _ in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g)
            optimizer.step()
        out[f"AdamW foreach={foreach} fused={fused}"] = _digest(*params)
    params = [torch.nn.Parameter(randn(128, 128))]
    params[0].grad = randn(128, 128) * 10
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    out["clip_grad_norm"] = _digest(params[0].grad)
    probs = torch.softmax(randn(8, 65), -1)
    draws = torch.multinomial(probs, 20, replacement=True,
                              generator=torch.Generator().manual_seed(5))
    out["multinomial"] = _digest(draws.float())
    return out


def cpu_name() -> str:
    """The CPU's model name and its widest vector units ("Intel(R) Xeon(R) Processor, AVX-512,
    AMX")."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                 if line.startswith("model name")),
                platform.machine())
    flags = next((set(line.split(":", 1)[1].split()) for line in info.splitlines()
                  if line.startswith("flags")), set())
    units = [unit for flag, unit in [("avx2", "AVX2"), ("avx512f", "AVX-512"), ("amx_tile", "AMX")]
             if flag in flags]
    return ", ".join([name, *units[-2:]])


def _child() -> None:
    """Run in a fresh process under the pin: print this host's fingerprints as one JSON line."""
    import torch

    print(json.dumps({"torch": torch.__version__,
                      "capability": torch.backends.cpu.get_cpu_capability(),
                      "threads": torch.get_num_threads(), "ops": operation_fingerprints(),
                      "training": fingerprint()}))


def host_fingerprints(extra_env: dict[str, str] | None = None) -> dict:
    """This host's fingerprints under the pin (plus ``extra_env``), computed by a fresh process
    (torch reads the pinned variables once, when it starts): the JSON of the project's per-host
    tool, with the short training's fingerprint under "training". A few seconds."""
    env = reference_environment()
    env.update(extra_env or {})
    done = subprocess.run([sys.executable, "-c",
                           "from course_lib.tools.op_fingerprints import _child; _child()"],
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the fingerprint process failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(cpu=cpu_name(), extra_env=[f"{k}={v}" for k, v in (extra_env or {}).items()])
    return result


def reference() -> dict:
    """The fingerprints of the host that stored the chapters' outputs (``make execute`` there)."""
    return json.loads(REFERENCE_RECORD.read_text())


def differences(host: dict, ref: dict) -> list[str]:
    """The names of what this host computes otherwise than the reference: each differing operation,
    and "the short training" when the end-to-end fingerprint differs. Empty: this host reproduces
    the reference bitwise (whatever its torch build: the bits decide, not the version string)."""
    diff = [name for name, digest in ref["ops"].items() if host["ops"].get(name) != digest]
    diff += [name for name in host["ops"] if name not in ref["ops"]]
    if host.get("training") != ref.get("training"):
        diff.append("the short training")
    return diff


def record_reference(path: Path = REFERENCE_RECORD) -> dict:
    """Write this host's fingerprints as the reference (after ``make execute`` stored every
    chapter here): one source for which host the stored outputs are bitwise on."""
    result = host_fingerprints()
    result["note"] = ("Fingerprints of the host that stored the chapters' outputs under the pin of "
                      "course_lib/tools/numerics.py; written by `python -m course_lib.tools "
                      "numerics record`.")
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def _cmd(args) -> int:
    extra = dict(pair.split("=", 1) for pair in args.env)
    if args.record:
        result = record_reference()
        print(f"wrote {REFERENCE_RECORD}: {len(result['ops'])} operations and the short training "
              f"of {result['cpu']}")
        return 0
    host = host_fingerprints(extra)
    if args.json:
        Path(args.json).write_text(json.dumps(host, indent=1) + "\n")
    against = json.loads(Path(args.compare).read_text()) if args.compare else reference()
    diff = differences(host, against)
    print(f"{host['cpu']} | torch {host['torch']} | {host['capability']} | {host['threads']} "
          f"threads | {args.env or 'the pin'}")
    print(f"{len(diff)} of {len(against['ops']) + 1} fingerprints differ from {against['cpu']}"
          + (f": {', '.join(diff)}" if diff else ""))
    if not args.compare:
        print("make test compares the chapters' outputs " + ("within their tolerances (tolerance "
                                                             "mode)" if diff
                                                               else "bitwise (bitwise mode)"))
    return 0


def add_parser(subparsers):
    """``fingerprints``: this host's kernels against the reference host's (the mode of make
    test)."""
    p = subparsers.add_parser("fingerprints",
                              help="this host's CPU kernels against those of the host that "
                                                   "stored the chapters (which mode make test "
                                                   "uses)")
    p.add_argument("env", nargs="*", metavar="VAR=VALUE",
                   help="variables set over the pin (act as another host)")
    p.add_argument("--compare", metavar="JSON",
                   help="compare with another host's JSON instead of the reference")
    p.add_argument("--json", metavar="PATH", help="also write this host's fingerprints to PATH")
    p.add_argument("--record", action="store_true",
                   help="write this host's fingerprints as the reference (after make execute "
                        "stored every chapter here)")
    p.set_defaults(func=_cmd)
    return p
