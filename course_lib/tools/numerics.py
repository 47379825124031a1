"""The reference numeric environment: the one place that says how chapter outputs are computed
when they are stored (``make execute``) and validated (nbval in ``make test`` / ``make notebooks``,
and the student-notebook check that runs in nbval's kernel).

Why. Floating-point sums depend on their order, and the order depends on the host: torch picks its
CPU kernels by the instruction set (AVX2, AVX-512), MKL and oneDNN pick theirs likewise, and a
parallel reduction splits its work by the thread count. The last bits then differ, and a few
hundred training steps turn that into different printed losses and samples. So every kernel that
executes a chapter for storing or checking runs with the variables below, whatever the host and
whatever ``OMP_NUM_THREADS`` the user exported. Readers (Colab, a laptop) are not pinned: they get
their own numbers, close to the stored ones.

Which variables matter, measured with ``python -m course_lib.tools numerics probe`` on a 2-core
AMD EPYC with AVX-512, torch 2.13.0 (CPU build, MKL 2024.2, oneDNN 3.12): 20 AdamW steps of the
CPU preset's GPT (4 layers, C=128, batch 12 x 64), compared by a hash of the trained weights:

- ``ATEN_CPU_CAPABILITY``: avx512 (this CPU's default), avx2 and default give three different
  results.
- ``ONEDNN_MAX_CPU_ISA``: AVX2 changes the result on an AVX-512 CPU.
- ``MKL_CBWR``: no change on that AMD CPU (MKL takes its AVX2 path on AMD anyway); on Intel CPUs
  with AVX-512, MKL takes its AVX-512 path unless told, so it stays pinned.
- Threads: 1 and 2 intra-op threads give different results. ``OMP_NUM_THREADS`` sets torch's
  (and OpenMP's) thread count at start-up; ``MKL_NUM_THREADS`` is pinned too, so that a user's
  export of it cannot change MKL's split.

- ``OMP_WAIT_POLICY``: ACTIVE and PASSIVE give the same result; it is pinned to PASSIVE for speed
  on shared cores (see ``REFERENCE``). The benchmarks take it from here too (``wait_passively``).

The pin makes one host agree with itself; it does not make two CPU vendors agree: under it, an
Intel Xeon and an AMD EPYC still compute other last bits in MKL, oneDNN and attention (measured
kernel by kernel in :mod:`course_lib.tools.op_fingerprints`). So the chapters are stored on one
reference host, and book/conftest.py compares bitwise on a host whose kernels compute as its do,
within each chapter's declared tolerance elsewhere (:mod:`course_lib.tools.tolerant_outputs`).
CPUs that cannot compute under the pin at all (ARM, such as Apple silicon; x86-64 without AVX2):
``unsupported_host`` says why, and nbval then runs the chapters without comparing their outputs.
"""
from __future__ import annotations

import getpass
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Mapping

THREADS = 2


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container without a user entry
        return f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"


REFERENCE = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's own CPU kernels
    "MKL_CBWR": "AVX2",  # MKL's conditional numerical reproducibility: its AVX2 code path
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN (matmuls and convolutions torch hands to it)
    "OMP_NUM_THREADS": str(THREADS),  # torch's intra-op threads, independent of the core count
    "MKL_NUM_THREADS": str(THREADS),
    # Changes no result, only the speed: an OpenMP thread that finishes its share spins, by
    # default, waiting for the next parallel region. On a machine whose cores are shared (several
    # kernels, a CI runner) the spinning thread takes the core from the thread it waits for, and
    # a model of small matrices, with a short parallel region per operation, crawls: chapter 10's
    # names model was stored at 1.9 steps/s, and at 41 and 74 steps/s once passive (60 steps outside
    # a kernel: 73-83 s spinning, 3.0 s passive, on 2 shared cores under a load of 11). Passive
    # threads sleep instead.
    "OMP_WAIT_POLICY": "PASSIVE",
    # torch.compile's kernels are cached on disk under a key that does not tell the pinned ISA from
    # the host's: kernels compiled for AVX-512 and loaded under the AVX2 pin gave NaN losses and
    # heap corruption (measured in tests/test_scale.py's compile test). Pinned runs keep their own
    # cache.
    "TORCHINDUCTOR_CACHE_DIR": os.path.join(tempfile.gettempdir(),
                                            f"torchinductor_{_user()}_reference"),
}
DESCRIPTION = f"x86-64 with AVX2, {THREADS} threads"


def reference_environment(base: Mapping[str, str] | None = None,
                          threads: int = THREADS) -> dict[str, str]:
    """``base`` (default: this process's environment) with the reference pinned over it;
    ``threads`` other than :data:`THREADS` pins another thread count (the shipped pretrained
    model is trained on 1, see :mod:`course_lib.tools.pretrained`)."""
    env = dict(os.environ if base is None else base)
    env.update(REFERENCE)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def apply_reference_environment() -> None:
    """Pin this process's environment, so that every kernel or process it starts from now on
    computes like the reference (torch reads these variables when it starts, so this does not
    change a torch already running here)."""
    os.environ.update(REFERENCE)


def wait_passively() -> None:
    """For a script that times work on shared cores (``benchmarks/``): OpenMP's idle threads
    sleep, as in the reference environment (``REFERENCE["OMP_WAIT_POLICY"]``), unless the caller
    chose a policy. OpenMP reads the variable once, when torch loads it, so where it is unset this
    restarts the script with it set (``os.execve``, same interpreter and arguments): call it first
    thing under ``if __name__ == "__main__":``."""
    if "OMP_WAIT_POLICY" in os.environ:
        return
    _restart_with(dict(os.environ, OMP_WAIT_POLICY=REFERENCE["OMP_WAIT_POLICY"]))


def run_in_reference_environment() -> None:
    """For a benchmark that measures in the reference environment (the chapters'): torch reads the
    pinned variables once, when it loads, and importing course_lib loads it, so where they are not
    all set this restarts the script with them (``os.execve``, same interpreter and arguments):
    call it first thing under ``if __name__ == "__main__":``, before any work."""
    env = reference_environment()
    if all(os.environ.get(k) == env[k] for k in REFERENCE):
        return
    _restart_with(env)


def _restart_with(env: dict[str, str]) -> None:
    """Replace this process by the same script (interpreter and arguments) in ``env``."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def unsupported_host(machine: str | None = None, capability: str | None = None) -> str | None:
    """Why this host cannot compute the reference bitwise, or None if it can. ``capability`` is
    what torch reports for this CPU under the pin (``AVX2`` where the CPU has AVX2)."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return f"this CPU is {machine}, not x86-64"
    if capability is None:
        capability = _pinned_capability()
    if capability.upper() not in ("AVX2", "AVX512"):
        return f"this x86-64 CPU has no AVX2 (torch reports {capability})"
    return None


def _pinned_capability() -> str:
    """The kernel ISA torch picks under the pin, asked of a fresh process (torch reads
    ATEN_CPU_CAPABILITY once, when it starts)."""
    done = subprocess.run([sys.executable, "-c",
                           "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                          env=reference_environment(), capture_output=True, text=True, timeout=120)
    return done.stdout.strip() or "unknown"


def host_note(reason: str | None) -> str:
    """The one line `make test` prints about the reference on this host."""
    if reason is None:
        return (f"numerics: chapters run in the reference environment ({DESCRIPTION}; "
                "course_lib/tools/numerics.py)")
    return (f"numerics: {reason}, so the chapters' stored outputs (the reference of {DESCRIPTION}) "
            "cannot be reproduced bitwise here: nbval runs every chapter and fails on errors, but "
            "compares no outputs. To validate outputs, run make test on an x86-64 machine with "
            "AVX2 (or let CI do it).")


def fingerprint(steps: int = 20) -> str:
    """A short training of the CPU preset's GPT (``steps`` AdamW steps, batch 12 x 64, on the first
    200,000 characters of tiny Shakespeare), summarised as ``ISA threads loss weights-hash``:
    two hosts compute the same training bitwise when their fingerprints are equal."""
    import hashlib

    import torch

    from ..data import get_batch, load_text
    from ..model import GPT, GPTConfig
    from ..tokenizers import CharTokenizer

    text = load_text("tinyshakespeare")[:200_000]
    tokenizer = CharTokenizer.from_text(text)
    data = torch.tensor(tokenizer.encode(text))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=64, n_layer=4, n_head=4,
                          n_embd=128, dropout=0.0, tie_weights=False))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    batches = torch.Generator().manual_seed(1)
    for _ in range(steps):
        _, loss = model(*get_batch(data, 64, 12, generator=batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    weights = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    return (f"{torch.backends.cpu.get_cpu_capability()} {torch.get_num_threads()} "
            f"{loss.item():.10f} {weights.hexdigest()[:16]}")


def fingerprint_in(env: Mapping[str, str], steps: int = 20) -> str:
    """:func:`fingerprint` computed by a fresh Python process with the environment ``env``."""
    code = f"from course_lib.tools.numerics import fingerprint; print(fingerprint({steps}))"
    done = subprocess.run([sys.executable, "-c", code], env=dict(env), capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"the fingerprint run failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip()


# Host conditions that change the result when nothing is pinned (see the module's docstring).
PROBE_CONDITIONS = {
    "this host's defaults": {},
    "ATEN_CPU_CAPABILITY=avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "ATEN_CPU_CAPABILITY=default": {"ATEN_CPU_CAPABILITY": "default"},
    "ONEDNN_MAX_CPU_ISA=AVX2": {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    "MKL_CBWR=AVX2": {"MKL_CBWR": "AVX2"},
    "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
    "OMP_NUM_THREADS=4": {"OMP_NUM_THREADS": "4"},
    "MKL_NUM_THREADS=1": {"MKL_NUM_THREADS": "1"},
    "OMP_WAIT_POLICY=ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
}
PINNED = tuple(REFERENCE)


def host_environment(condition: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with none of the pinned variables, then ``condition``: a host
    where a user exported exactly those settings."""
    env = {k: v for k, v in os.environ.items() if k not in PINNED}
    env.update(condition)
    return env


def probe(steps: int = 20) -> list[tuple[str, str, str]]:
    """(condition, fingerprint without the pin, fingerprint with the pin) for each condition."""
    rows = []
    for name, condition in PROBE_CONDITIONS.items():
        host = host_environment(condition)
        rows.append((name, fingerprint_in(host, steps),
                     fingerprint_in(reference_environment(host), steps)))
    return rows


def _cmd_probe(args) -> int:
    print(f"{'host condition':<30} {'without the pin (ISA threads loss hash)':<48} with the pin")
    for name, free, pinned in probe(args.steps):
        print(f"{name:<30} {free:<48} {pinned}", flush=True)
    reason = unsupported_host()
    print(host_note(reason))
    return 0


def add_parser(subparsers):
    """``numerics probe``: which host settings change a short training, with and without the pin."""
    p = subparsers.add_parser("numerics",
                              help="the reference numeric environment of stored outputs")
    sub = p.add_subparsers(dest="numerics_command", required=True)
    probe_parser = sub.add_parser("probe", help="train briefly under several host settings, with "
                                                "and without the pin")
    probe_parser.add_argument("--steps", type=int, default=20)
    probe_parser.set_defaults(func=_cmd_probe)
    return p
