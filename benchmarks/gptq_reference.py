"""Chapter 23's GPTQ (course_lib/quantize/gptq.py) against the authors' published code, on the same
weights, the same Hessian and the same settings: IST-DASLab/gptq (Frantar et al. 2022), its
``gptq.py`` (``GPTQ.fasterquant``) and ``quant.py`` (``Quantizer``), from a checkout of your own
(never copied into this repository). It runs on a CPU as published, with one shim: its
``torch.cuda.synchronize()`` (a timing aid) is a no-op while it runs, and its prints are captured.

The weights: every linear layer of the shipped model (course_lib/pretrained.py; the embeddings have
no Hessian). The Hessian of each layer: ``2 X X^T / N`` of its inputs in the float model on 128
random training windows (seed 0), accumulated by ours (course_lib.quantize.gptq.Hessian) and handed
to both programs as the same float32 matrix; the reference's own accumulation (``add_batch``) of
the same inputs is compared with it too. The settings, the same on both sides: bits, one grid per
row or per group of 32, symmetric or not, damping 0.01 of the mean diagonal, no act-order (ours has
none), the block size. The grid: "shared" (the reference's Quantizer given the course's
``find_params``: float16 scales rounded up, its symmetric range) compares the GPTQ updates alone;
"theirs" (the reference's own Quantizer, untouched, its per-row grid handed to ours) the published
code unchanged, per row only (ours takes a fixed grid per row).

Per layer: the fraction of integer codes that differ, the rows where one does, the largest absolute
difference of the dequantized weights, each one's output error ``tr((W - Q) H (W - Q)^T) / 2``, and
for each row whose codes differ, its first difference (:func:`compare`): a code whose value (in
steps of the grid) lay within float32 noise of a rounding boundary ``k + 1/2``, or a group's grid
one float16 step away whose two scales, logged before the float16 round-up, lay one each side of a
float16 value and within float32 noise of each other (:func:`grid_flip`). After it the rest of the
row legitimately differs: GPTQ moves the columns still free to absorb each error. The same numbers
for our float32 run against our float64 run measure what float32 alone does.

The tolerance (TOLERANCE), where both run the same algorithm: the two compute the inverse
Hessian's Cholesky factor differently (``cholesky_solve`` here, ``cholesky_inverse`` there) and sum
in float32 in other orders, so the values they round differ by float32 noise (measured: about 1e-4
step at most, the damped Hessians' condition numbers being 1e3-2e4); a value that close to
``k + 1/2``, or a group maximum that close to a float16 rounding point, rounds the other way. So:
at most 0.01% of a setting's codes differ (our float32 and float64 runs: as many), every row's first
difference is such a boundary case (within 1e-3 step, its gap within the noise, or a scale one
float16 step away whose unrounded values straddle that float16 point within the noise), and every
layer's output error within 1% of the other's.

    git clone https://github.com/IST-DASLab/gptq CHECKOUT   # a checkout of your own
    PYTHONPATH=$PWD python benchmarks/gptq_reference.py --reference CHECKOUT --update-record

writes course_lib/records/gptq_reference.json, which chapter 23 prints. Without ``--reference``
only the float32-against-float64 numbers are measured. ``--whole-model`` (with ``--reference``) also
runs the reference's ``fasterquant`` through the whole model at chapter 23's settings (WHOLE_MODEL:
int3 and int4 symmetric groups of 32; blocks of 32 and 128 with our grid, 128 with its own), each
layer calibrated on what the layers already quantized leave it, the embeddings in int8 per row, and
scores it on the validation split in bits per character, beside ours (quantize_gptq): the chapter's
GPTQ result against what the published code gives at its defaults.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_args import RECORDS, add_record_options, count, record_file  # noqa: E402
from course_lib.tools.numerics import apply_reference_environment  # noqa: E402  (no torch)

SHIPPED = RECORDS / "gptq_reference.json"
REFERENCE = "IST-DASLab/gptq"
URL = "https://github.com/IST-DASLab/gptq"
# (name, bits, granularity, group size, symmetric, block size); each is run with both grids where
# the grid can be shared (see the docstring)
SETTINGS = (
    ("int4 sym per row", 4, "row", None, True, 128),
    ("int3 asym per row", 3, "row", None, False, 128),
    ("int4 asym group-32, blocks of 32", 4, "group", 32, False, 32),
    ("int3 sym group-32, blocks of 32", 3, "group", 32, True, 32),
    ("int4 asym group-32, blocks of 128", 4, "group", 32, False, 128),
)
# The reference fixes a group's grid from ``W[:, i:i + group]``, the weights as the *previous
# blocks* left them, without the updates of the columns already quantized in the current block;
# ours from the weights as every earlier column left them. The two coincide when every group
# starts a block (block size = group size); with groups of 32 in blocks of 128, three groups in
# four get their grid from other weights: a different algorithm, measured, not a tolerance.
DIFFERS_BY_DESIGN = {"int4 asym group-32, blocks of 128": "int4 asym group-32, blocks of 32"}
# --whole-model: the authors' fasterquant through the whole model at chapter 23's settings
# (symmetric, groups of 32), each layer on the inputs the layers already quantized leave it, as
# course_lib.quantize.apply.quantize_gptq does, the embeddings in int8 per row; (bits, block size,
# grid), grid None: ours (course_lib's quantize_gptq at its BLOCK_SIZE, independent of the block)
WHOLE_MODEL = tuple((bits, block, grid) for bits in (3, 4)
                    for block, grid in ((None, None), (32, "shared"), (128, "shared"),
                                        (128, "theirs")))
# The tolerance where both run the same algorithm (justified in the chapter and the record):
TOLERANCE = {
    "codes_fraction": 1e-4,  # at most 0.01% of the codes of a setting differ (observed: 0.005%) ...
    "boundary_steps": 1e-3,  # ... each row's first flip explained, within 1e-3 step of a boundary
    "output_error_rel": 0.01,  # each layer's output error within 1% of the other's
}


def reference_path(text: str) -> Path:
    """An argparse type: a folder holding the reference's gptq.py and quant.py."""
    path = Path(text)
    if not ((path / "gptq.py").is_file() and (path / "quant.py").is_file()):
        raise argparse.ArgumentTypeError(
            f"{text}: no gptq.py and quant.py there: give a checkout of {REFERENCE} "
            f"(git clone {URL})")
    return path


def load_reference(path: Path):
    """The reference's modules ``quant`` and ``gptq``, imported from ``path`` (its gptq.py does
    ``from quant import *``), its import-time prints captured, the torch flags it sets restored."""
    import torch
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    modules, before = {}, {name: sys.modules.get(name) for name in ("quant", "gptq")}
    with contextlib.redirect_stdout(io.StringIO()):
        for name in ("quant", "gptq"):
            spec = importlib.util.spec_from_file_location(name, path / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            modules[name] = module
    for name, module in before.items():  # the names are generic: leave sys.modules as it was
        if module is None:
            del sys.modules[name]
        else:
            sys.modules[name] = module
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    return modules["quant"], modules["gptq"]


def describe_reference(path: Path) -> dict:
    """Name, commit (when ``path`` is a git checkout) and the sha256 of the two files used."""
    try:
        commit = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"name": REFERENCE, "url": URL, "commit": commit,
            "sha256": {f: hashlib.sha256((path / f).read_bytes()).hexdigest()
                       for f in ("gptq.py", "quant.py")},
            "used": "gptq.GPTQ.fasterquant, quant.Quantizer, quant.quantize",
            "shim": "torch.cuda.synchronize() a no-op during fasterquant; its prints captured; "
                    "gptq.quantize wrapped to log what it rounds (its result returned unchanged "
                    "and checked against the layer's weight it writes); grid 'shared': "
                    "Quantizer.find_params replaced by the course's"}


class Log:
    """What each program rounds, column by column, each (out,): ``u = w / scale``, the code, the
    dequantized weight, the grid (scale, zero point on our scale) it was rounded on, and that
    grid unrounded (:class:`RawGrid`; NaN where the grid was not found by the course's
    ``find_params``: the reference's own grid, or one handed over)."""

    def __init__(self, raw=None):
        self.raw = raw
        self.columns = {k: [] for k in ("u", "codes", "deq", "scale", "zero", "raw_scale",
                                        "raw_zero")}

    def add(self, u, codes, deq, scale, zero):
        import torch
        nan = torch.full_like(u, float("nan"))
        raw = self.raw.last if self.raw is not None and self.raw.last is not None else (nan, nan)
        raw = [v.reshape(-1, *[1] * (u.dim() - 1)) for v in raw]  # (rows,) -> u's shape
        for k, v in zip(self.columns, (u, codes, deq, scale, zero, *raw)):
            self.columns[k].append(v.double().expand_as(u).flatten())

    def stacked(self) -> dict:
        import torch
        return {k: torch.stack(v, 1) for k, v in self.columns.items()}  # (out, in) each


class RawGrid:
    """The course's ``find_params``, remembering its grid before rounding: ``last`` is the pair
    (scale before the float16 round-up, zero point before it is rounded), each (rows,), of the
    latest call. A grid flip is only explained when these lay within noise of a rounding point."""

    def __init__(self):
        self.last = None

    def find_params(self, groups, bits, symmetric):
        import course_lib.quantize.rtn as rtn
        seen = {}

        def round_up(scale):
            seen["scale"] = scale
            return up(scale)

        up = rtn.round_up_to_stored
        with mock.patch.object(rtn, "round_up_to_stored", round_up):
            scale, zero = rtn.find_params(groups, bits, symmetric)
        # asymmetric: zero = round(-lo / scale) with lo = min(min w, 0) (rtn.find_params)
        raw_zero = (zero if symmetric
                    else -groups.float().amin(-1, keepdim=True).clamp(max=0) / scale)
        self.last = (seen["scale"].flatten(), raw_zero.flatten())
        return scale, zero


def run_ours(w, H, setting, dtype, grid=None):
    """Our GPTQ, every rounding logged: (u, codes, dequantized), each (out, in)."""
    import course_lib.quantize.gptq as ours
    from course_lib.quantize.rtn import QuantConfig, dequantize_codes, quantize_codes
    _, bits, granularity, group, symmetric, block = setting
    config = QuantConfig(bits=bits, granularity=granularity, group_size=group or 32,
                         symmetric=symmetric)
    log = Log(RawGrid())

    def logged(x, scale, zero, bits, symmetric):
        q = quantize_codes(x, scale, zero, bits, symmetric)
        log.add(x.float() / scale, q, dequantize_codes(q, scale, zero), scale, zero)
        return q

    with (mock.patch.object(ours, "quantize_codes", logged),
          mock.patch.object(ours, "find_params", log.raw.find_params)):
        qt = ours.gptq_quantize(w, H, config, ours.DAMP, block, dtype=dtype, grid=grid)
    got = log.stacked()
    if grid is None and not (got["deq"].float() == qt.dequantize()).all():
        raise AssertionError("the logged roundings are not what gptq_quantize returned")
    return got


def run_reference(quant, gptq, w, H, setting, grid):
    """The reference's GPTQ.fasterquant on the same weight and Hessian; ``grid`` "shared": its
    Quantizer finds the course's grid, "theirs": its own. Returns (u, codes, dequantized) with the
    codes on our scale (symmetric: minus 2**(bits-1)), and the per-row grid it used."""
    import torch
    _, bits, granularity, group, symmetric, block = setting
    offset = 2 ** (bits - 1) if symmetric else 0
    raw = RawGrid() if grid == "shared" else None

    class SharedGrid(quant.Quantizer):
        def find_params(self, x, weight=False):
            scale, zero = raw.find_params(x, bits, symmetric)  # (rows, 1) each
            self.scale, self.zero = scale, zero + offset

    layer = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
    layer.weight.data = w.clone().float()
    g = gptq.GPTQ(layer)
    g.H = H.float().clone()
    g.quantizer = (SharedGrid if grid == "shared" else quant.Quantizer)()
    g.quantizer.configure(bits, perchannel=True, sym=symmetric, mse=False)
    log, original = Log(raw), gptq.quantize

    def logged(x, scale, zero, maxq):
        q = torch.clamp(torch.round(x / scale) + zero, 0, maxq)
        out = original(x, scale, zero, maxq)
        log.add(x / scale, q - offset, out, scale, zero - offset)
        return out

    with (mock.patch.object(gptq, "quantize", logged),
          mock.patch.object(torch.cuda, "synchronize", lambda *a, **k: None),
          contextlib.redirect_stdout(io.StringIO())):
        g.fasterquant(blocksize=block, percdamp=0.01, groupsize=group or -1, actorder=False)
    got = log.stacked()
    if not torch.equal(got["deq"].float(), layer.weight.data):
        raise AssertionError("the logged roundings are not the reference's result")
    return got, (g.quantizer.scale.clone(), g.quantizer.zero.clone() - offset)


def compare(w, H, a, b, levels: int) -> dict:
    """Two runs' logs: how far apart, and why. A *grid flip*: a weight rounded on a scale or zero
    point that differs (a group's grid is found from weights that float32 noise has moved; a
    scale rounded up to float16 can then land one float16 step away). *Noise*: the largest gap
    between the values the two round, in steps, before the first difference of any kind in the
    row (float32's own). Each row's first differing thing: a code, at a distance from a rounding
    boundary ``k + 1/2`` with a gap within the noise (a boundary case), or a grid
    (:func:`grid_flip`: the unrounded scales one each side of a float16 value, within the noise of
    it; the zero points alike); what follows in the row differs legitimately: GPTQ moves the
    columns still free to absorb each error. ``levels``: the steps the scale divides a group's
    range into (2**(b-1) - 1 symmetric, 2**b - 1 asymmetric), to put a scale's distance in steps
    of the grid."""
    import torch
    from course_lib.quantize.gptq import output_error
    n = w.shape[1]
    differ = a["codes"] != b["codes"]  # (out, in)
    grid = (a["scale"] != b["scale"]) | (a["zero"] != b["zero"])

    def first(mask):  # (out,): the first column where mask holds, n where none
        return torch.where(mask.any(1), mask.long().argmax(1), n)

    first_code, first_grid = first(differ), first(grid)
    clean = torch.arange(n)[None, :] < torch.minimum(first_code, first_grid)[:, None]
    gap = (a["u"] - b["u"]).abs()
    noise = gap[clean].max().item() if clean.any() else 0.0
    flips = []
    for r in differ.any(1).nonzero().flatten().tolist():
        c = first_code[r].item()
        if first_grid[r] <= c:  # the grid flipped first
            g = first_grid[r].item()
            flips.append({"row": r, "column": c, "after_grid_flip": g,
                          **grid_flip(a, b, r, g, levels, noise)})
        else:
            dist = [abs(abs(x[r, c] - torch.floor(x[r, c])) - 0.5).item()
                    for x in (a["u"], b["u"])]
            flips.append({"row": r, "column": c, "boundary_steps": min(dist),
                          "gap_steps": gap[r, c].item(),
                          "explained": bool(gap[r, c] <= noise)})
    da, db = a["deq"].float(), b["deq"].float()
    ea, eb = output_error(w, da, H), output_error(w, db, H)
    return {"codes_differ": int(differ.sum()), "codes": differ.numel(),
            "rows_differ": int(differ.any(1).sum()), "rows": len(differ),
            "rows_grid_flipped": int(grid.any(1).sum()),
            "max_abs_weight_diff": (da - db).abs().max().item(),
            "output_error": [ea, eb], "output_error_rel": abs(ea - eb) / max(ea, eb, 1e-30),
            "noise_steps": noise, "first_flips": flips}


def grid_flip(a, b, r, g, levels, noise) -> dict:
    """Why two runs' grids differ at row ``r``, column ``g``. Each run's scale is its unrounded
    scale (a group's range over ``levels``) rounded up to a float16. Explained only when the two
    stored scales are equal or neighbouring float16 values ``lo < hi``, the two unrounded scales
    lie one each side of ``lo`` (where rounding up jumps from ``lo`` to ``hi``), and their gap, in
    steps of the grid (the range moved by it, ``gap * levels / scale``), is within the noise;
    and when the zero points differ, by one code, their unrounded values lie one each side of a
    half-way point, within the noise plus what the scale's own step moves them."""
    import torch
    from course_lib.quantize.rtn import SCALE_DTYPE
    sa, sb = a["scale"][r, g], b["scale"][r, g]
    lo, hi = torch.stack([sa, sb]).to(SCALE_DTYPE).double().sort().values
    ra, rb = a["raw_scale"][r, g], b["raw_scale"][r, g]
    per_step = levels / lo  # a scale's change -> the change of the range it covers, in steps
    scale_gap = ((ra - rb).abs() * per_step).item()
    out = {"scale_gap_steps": scale_gap,
           "scale_boundary_steps": (torch.minimum((ra - lo).abs(), (rb - lo).abs())
                                    * per_step).item()}
    if hi == lo:
        scale_ok = True
    else:
        straddle = (min(ra, rb) <= lo) & (max(ra, rb) > lo)
        scale_ok = bool(torch.nextafter(lo.half(), hi.half()).double() == hi and straddle
                        and scale_gap <= noise)
    za, zb = a["raw_zero"][r, g], b["raw_zero"][r, g]
    zero_ok = True
    if a["zero"][r, g] != b["zero"][r, g]:
        moved = torch.maximum(za.abs(), zb.abs()) * (hi / lo - 1)  # by the scale's own step
        zero_gap = (za - zb).abs().item()
        out["zero_gap_steps"] = zero_gap
        zero_ok = bool((a["zero"][r, g] - b["zero"][r, g]).abs() == 1
                       and zero_gap <= noise + moved)
    out["explained"] = bool(scale_ok and zero_ok and not torch.isnan(ra + rb))
    return out


def hessians(model, calibration, gptq=None, batch_size: int = 64):
    """Each linear layer's Hessian by our accumulator (float64), and, with the reference's module
    ``gptq``, the largest difference of its own ``add_batch`` from ours (relative to ours' largest
    entry; it sums over windows, not tokens: T times ours)."""
    import torch
    from course_lib.quantize.gptq import Hessian
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    ours = {n: Hessian(m.in_features) for n, m in layers}
    theirs = {n: gptq.GPTQ(m) for n, m in layers} if gptq else {}
    def collect(name):
        def hook(module, args):
            ours[name].add(args[0])
            if name in theirs:
                theirs[name].add_batch(args[0].detach().float(), None)
        return hook

    hooks = [m.register_forward_pre_hook(collect(n)) for n, m in layers]
    with torch.no_grad():
        for i in range(0, len(calibration), batch_size):
            model(calibration[i:i + batch_size])
    for hook in hooks:
        hook.remove()
    H = {n: ours[n].matrix for n, _ in layers}
    T = calibration.shape[1]
    agree = {n: ((theirs[n].H.double() / T - H[n]).abs().max() / H[n].abs().max()).item()
             for n in theirs}
    return layers, H, agree


def whole_model(quant, gptq, model, calibration, x, y, base) -> list[dict]:
    """Bits per character added (paired bootstrap over the windows, as benchmarks/quantize.py)
    for each WHOLE_MODEL setting: ours, and the reference's fasterquant run layer after layer."""
    import copy
    import time

    import torch
    from course_lib.quantize.apply import (bits_per_char, bootstrap_interval, embedding_weights,
                                           layer_hessian, quantize_gptq, store_embedding,
                                           weight_modules, window_losses)
    from course_lib.quantize.rtn import QuantConfig
    rows = []
    for bits, block, grid in WHOLE_MODEL:
        t = time.perf_counter()
        config = QuantConfig(bits=bits, granularity="group", group_size=32)
        if grid is None:
            qmodel, _ = quantize_gptq(model, config, calibration)
        else:
            setting = (config.name, bits, "group", 32, True, block)
            qmodel = copy.deepcopy(model).eval()
            tables = embedding_weights(qmodel)
            with torch.no_grad():
                for _, m in weight_modules(qmodel):
                    if id(m.weight) in tables:
                        m.weight.copy_(store_embedding(m, config, "int8").dequantize())
                        continue
                    H = layer_hessian(qmodel, m, calibration)
                    got, _ = run_reference(quant, gptq, m.weight.detach(), H, setting, grid)
                    m.weight.copy_(got["deq"].float())
        delta = window_losses(qmodel, x, y) - base
        rows.append({"bits": bits, "granularity": "group", "group_size": 32, "symmetric": True,
                     "program": "ours" if grid is None else "reference", "block_size": block,
                     "grid": grid, "embeddings": "int8", "delta_bpc": bits_per_char(delta),
                     "delta_ci": bootstrap_interval(delta),
                     "seconds": time.perf_counter() - t})
        r = rows[-1]
        print(f"whole model int{bits} sym group-32 {r['program']:9} blocks {block} grid {grid}: "
              f"{r['delta_bpc']:+.4f} [{r['delta_ci'][0]:+.4f}, {r['delta_ci'][1]:+.4f}] "
              "bits/char", flush=True)
    return rows


def check(record: dict) -> list[str]:
    """What in ``record`` breaks the tolerance (empty: it holds), in every setting where both run
    the same algorithm, both grids."""
    tol, problems = record["tolerance"], []
    for s in record["settings"]:
        if s["name"] in record["differs_by_design"]:
            continue
        for grid, layers in s["reference"].items():
            where = f"{s['name']}, grid {grid}"
            if (f := s["summary"][grid]["codes_fraction"]) > tol["codes_fraction"]:
                problems.append(f"{where}: {f:.2%} of the codes differ")
            for name, r in layers.items():
                if not all(f["explained"] and f.get("boundary_steps", 0) <= tol["boundary_steps"]
                           for f in r["first_flips"]):
                    problems.append(f"{where}, {name}: a first flip off a boundary, or a grid "
                                    "flip that float32 noise at a float16 point does not explain")
                if r["output_error_rel"] > tol["output_error_rel"]:
                    problems.append(f"{where}, {name}: output errors {r['output_error']}")
    return problems


def summary(layers: dict) -> dict:
    """One setting's layers together."""
    def total(key):
        return sum(r[key] for r in layers.values())

    flips = [f for r in layers.values() for f in r["first_flips"]]
    return {"codes_fraction": total("codes_differ") / total("codes"),
            **{k: total(k) for k in ("codes_differ", "codes", "rows_differ", "rows",
                                     "rows_grid_flipped")},
            "max_abs_weight_diff": max(r["max_abs_weight_diff"] for r in layers.values()),
            "max_output_error_rel": max(r["output_error_rel"] for r in layers.values()),
            "output_error_total": [sum(r["output_error"][i] for r in layers.values())
                                   for i in (0, 1)],
            "first_flips": len(flips),
            "first_flips_explained": sum(f["explained"] for f in flips),
            "first_flips_after_grid_flip": sum("after_grid_flip" in f for f in flips),
            "grid_flips_explained": sum(f["explained"] for f in flips if "after_grid_flip" in f),
            "max_grid_flip_scale_gap_steps": max((f["scale_gap_steps"] for f in flips
                                                  if "scale_gap_steps" in f), default=0.0),
            "max_first_flip_boundary_steps": max((f["boundary_steps"] for f in flips
                                                  if "boundary_steps" in f), default=0.0),
            "max_noise_steps": max(r["noise_steps"] for r in layers.values())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reference", type=reference_path, default=None, metavar="PATH",
                   help=f"a checkout of {REFERENCE} (its gptq.py and quant.py); without it only "
                   "our float32 run against our float64 run is measured")
    p.add_argument("--calibration", type=count, default=128, help="calibration windows")
    p.add_argument("--layers", type=count, default=None, help="the first N linear layers")
    p.add_argument("--whole-model", action="store_true",
                   help="also run the reference through the whole model at chapter 23's settings "
                   "and score it in bits per character (needs --reference)")
    p.add_argument("--val-windows", type=count, default=None,
                   help="--whole-model: the first N validation windows (default all)")
    add_record_options(p, SHIPPED, "--json")
    args = p.parse_args(argv)
    if args.update_record and args.reference is None:
        p.error("--update-record writes the comparison with the reference: give --reference PATH")
    if args.whole_model and args.reference is None:
        p.error("--whole-model runs the reference through the model: give --reference PATH")
    apply_reference_environment()  # before torch is imported
    record_out = record_file(p, args, SHIPPED, "--json")
    import torch

    from course_lib.data import load_text, train_val_split
    from course_lib.pretrained import load_pretrained

    quant, gptq = load_reference(args.reference) if args.reference else (None, None)
    model, tokenizer = load_pretrained()
    model.eval()
    train, val = train_val_split(torch.tensor(tokenizer.encode(load_text())))
    T = model.config.block_size
    starts = torch.randint(0, len(train) - T - 1, (args.calibration,),
                           generator=torch.Generator().manual_seed(0))
    calibration = torch.stack([train[s:s + T] for s in starts])  # (n, T)
    layers, H, agree = hessians(model, calibration, gptq)
    layers = layers[:args.layers]
    given = list(argv if argv is not None else sys.argv[1:])
    for i, a in enumerate(given):  # the checkout's place is the reader's own: its commit says which
        if a.startswith("--reference="):
            given[i] = "--reference=CHECKOUT"
        elif i and given[i - 1] == "--reference":
            given[i] = "CHECKOUT"
    record = {"command": "python benchmarks/gptq_reference.py " + " ".join(given),
              "reference": describe_reference(args.reference) if args.reference else None,
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "calibration_windows": args.calibration, "damp": 0.01, "act_order": False,
              "tolerance": TOLERANCE, "differs_by_design": DIFFERS_BY_DESIGN,
              "layers": {n: {"shape": list(m.weight.shape),
                             "cond_damped_H": torch.linalg.cond(
                                 H[n] + 0.01 * H[n].diag().mean() * torch.eye(len(H[n]),
                                                                               dtype=H[n].dtype)
                             ).item(),
                             "hessian_accumulation_rel_diff": agree.get(n)}
                         for n, m in layers},
              "settings": [], "loadavg_start": os.getloadavg()}
    theirs_runs = {}  # (setting, layer) -> the reference's log, for DIFFERS_BY_DESIGN's twins
    for setting in SETTINGS:
        name, bits, granularity = setting[:3]
        row = {"name": name, "bits": bits, "granularity": granularity, "group_size": setting[3],
               "symmetric": setting[4], "block_size": setting[5], "float64": {}, "reference": {}}
        grids = ["shared", "theirs"] if granularity == "row" else ["shared"]
        levels = 2 ** (bits - 1) - 1 if setting[4] else 2 ** bits - 1  # steps in a grid's range
        for n, m in layers:
            w = m.weight.detach()
            ours32 = run_ours(w, H[n], setting, torch.float32)
            row["float64"][n] = compare(w, H[n], ours32, run_ours(w, H[n], setting,
                                                                  torch.float64), levels)
            for grid in grids if gptq else []:
                theirs, (scale, zero) = run_reference(quant, gptq, w, H[n], setting, grid)
                mine = ours32 if grid == "shared" else run_ours(w, H[n], setting, torch.float32,
                                                                grid=(scale, zero))
                row["reference"].setdefault(grid, {})[n] = compare(w, H[n], mine, theirs, levels)
                if grid == "shared":
                    theirs_runs[name, n] = theirs
                if (twin := DIFFERS_BY_DESIGN.get(name)) and grid == "shared":
                    # the reference against itself at blocks of 32: its result depends on the
                    # block size (ours does not: tests/test_quantize_gptq.py)
                    row.setdefault("reference_vs_its_twin", {})[n] = compare(
                        w, H[n], theirs, theirs_runs[twin, n], levels)
        row["summary"] = {g: summary(v) for g, v in row["reference"].items()}
        row["summary"]["float64"] = summary(row["float64"])
        if "reference_vs_its_twin" in row:
            row["summary"]["reference_vs_its_twin"] = summary(row["reference_vs_its_twin"])
        if name in DIFFERS_BY_DESIGN:  # nearly every row differs: keep the first few of each
            for layers in (*row["reference"].values(), row.get("reference_vs_its_twin", {})):
                for r in layers.values():
                    r["first_flips"] = r["first_flips"][:3]
        record["settings"].append(row)
        for g, s in row["summary"].items():
            what = {"float64": "ours f32 vs f64", "reference_vs_its_twin":
                    "reference vs itself, blocks of 32"}.get(g, f"ours vs reference, grid {g}")
            print(f"{name:34} {what:34}"
                  f" codes differ {s['codes_differ']:5}/{s['codes']} ({s['codes_fraction']:.3%}),"
                  f" rows {s['rows_differ']}/{s['rows']} (grid flips in "
                  f"{s['rows_grid_flipped']}), "
                  f"first flips {s['first_flips_explained']}/{s['first_flips']} explained "
                  f"({s['first_flips_after_grid_flip']} after a grid flip), at "
                  f"most {s['max_first_flip_boundary_steps']:.1e} step from a boundary (noise "
                  f"{s['max_noise_steps']:.1e}), output errors within "
                  f"{s['max_output_error_rel']:.2%}", flush=True)
        record_out.progress(record)
    if args.whole_model:
        from course_lib.quantize.apply import window_losses, windows
        x, y = windows(val, T, args.val_windows)
        record["val_windows"] = len(x)
        record["whole_model"] = whole_model(quant, gptq, model, calibration, x, y,
                                            window_losses(model, x, y))
        record_out.progress(record)
    if gptq:
        problems = check(record)
        record["within_tolerance"] = not problems
        print("within the tolerance" if not problems else "\n".join(problems))
    record["loadavg_end"] = os.getloadavg()
    record_out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
