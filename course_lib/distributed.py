"""Data-parallel training with PyTorch's own engine, ``torch.distributed``, launched by ``torchrun``
(chapter 12).

``torchrun --nproc_per_node=N -m course_lib train ...`` starts N copies of the program and tells
each, through environment variables, who it is: ``RANK`` (0 .. N-1 over all machines),
``LOCAL_RANK`` (its GPU on this machine) and ``WORLD_SIZE`` (N). :func:`setup` joins them into one
process group: NCCL between GPUs, gloo between CPU processes. The :class:`~course_lib.train.Trainer`
then wraps the model in ``DistributedDataParallel`` (DDP): every process runs forward and backward
on its own batches, and DDP averages the gradients of all processes during backward (an all-reduce),
so every copy takes the same optimizer step and the copies stay identical.

The global batch of one optimizer step is ``grad_accum_steps`` micro-batches of ``batch_size``
sequences, whatever the number of processes: with N processes each one handles
``grad_accum_steps / N`` of them (:func:`local_micro_batches`). Micro-batch ``j`` always comes
from its own random stream (:func:`batch_stream_seed`), so one process with accumulation and N
processes draw exactly the same global batch, and train to the same weights.

Only rank 0 logs, evaluates and writes checkpoints (unwrapped, so they load with or without DDP).
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    """True in the process that logs, evaluates and saves: rank 0, or the only process."""
    return rank() == 0


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def launched_world_size() -> int:
    """The number of processes torchrun started (1 without torchrun), before :func:`setup`."""
    return int(os.environ.get("WORLD_SIZE", 1)) if launched_by_torchrun() else 1


def setup(device: str) -> str:
    """Join the process group when started by torchrun (else do nothing). Returns the device this
    process trains on: ``cuda:LOCAL_RANK`` for GPUs, else ``device`` as given."""
    if not launched_by_torchrun() or is_distributed():
        return device
    if device.startswith("cuda"):
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        dist.init_process_group(backend="nccl")
        return f"cuda:{local_rank}"
    if device == "mps":
        raise ValueError("torchrun on Apple's mps device is not supported by torch.distributed: "
                         "use --device cpu")
    dist.init_process_group(backend="gloo")
    return device


def teardown() -> None:
    if is_distributed():
        dist.destroy_process_group()


def local_micro_batches(grad_accum_steps: int, n_processes: int) -> int:
    """How many of a step's ``grad_accum_steps`` micro-batches each of ``n_processes`` handles."""
    if grad_accum_steps % n_processes:
        raise ValueError(
            f"grad_accum_steps ({grad_accum_steps}) must be a multiple of the number of processes "
            f"({n_processes}): a step's global batch is grad_accum_steps micro-batches shared out "
            f"among the processes, and {n_processes} processes cannot share {grad_accum_steps}. "
            f"Use --set grad_accum_steps={n_processes * max(1, grad_accum_steps // n_processes)} "
            f"(or fewer processes)")
    return grad_accum_steps // n_processes


def batch_stream_seed(seed: int, micro_batch: int) -> int:
    """The seed of micro-batch ``micro_batch``'s random stream: ``seed`` for the first (so one
    process without accumulation draws what it always drew), ``seed + 1000 * j`` for the j-th."""
    return seed + 1000 * micro_batch


def my_micro_batches(grad_accum_steps: int) -> range:
    """The indices (0 .. grad_accum_steps - 1) of the micro-batches this process handles."""
    n = local_micro_batches(grad_accum_steps, world_size())
    return range(rank() * n, (rank() + 1) * n)


def batch_streams(seed: int, grad_accum_steps: int) -> tuple[range, list[torch.Generator]]:
    """This process's micro-batches of a step (:func:`my_micro_batches`) and a random batch
    stream for each, seeded with :func:`batch_stream_seed`."""
    mine = my_micro_batches(grad_accum_steps)
    return mine, [torch.Generator().manual_seed(batch_stream_seed(seed, j)) for j in mine]


def stream_states(micro_batches: range, generators: list[torch.Generator]) -> list[torch.Tensor]:
    """The state of every micro-batch's batch stream, in micro-batch order, gathered from the
    processes that draw them (this process's alone without torchrun). Every process must call it."""
    states = {}
    for part in gather({j: g.get_state() for j, g in zip(micro_batches, generators)}):
        states.update(part)
    return [states[j] for j in sorted(states)]


def restore_streams(micro_batches: range, generators: list[torch.Generator], saved: list,
                    seed: int) -> bool:
    """Set this process's batch streams to the ``saved`` states of every micro-batch (as
    :func:`stream_states` returned them) and return True; where the saved run had another number
    of micro-batches per step, seed fresh streams from ``seed`` instead and return False."""
    if len(saved) == len(micro_batches) * world_size() and all(s is not None for s in saved):
        for j, g in zip(micro_batches, generators):
            g.set_state(saved[j])
        return True
    for j, g in zip(micro_batches, generators):
        g.manual_seed(batch_stream_seed(seed, j))
    return False


def gather(obj) -> list:
    """Every process's ``obj``, in rank order (a list of one object without torchrun)."""
    if not is_distributed():
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def average(value: float) -> float:
    """The mean of ``value`` over all processes (``value`` itself without torchrun)."""
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.float64,
                     device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t)
    return t.item() / world_size()


def any_process(flag: bool) -> bool:
    """True on every process when ``flag`` is True on at least one (e.g. Ctrl-C seen by one)."""
    if not is_distributed():
        return flag
    t = torch.tensor([int(flag)], device="cuda" if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` in DistributedDataParallel when running under torchrun, else ``model`` itself.
    DDP copies rank 0's weights to every process at once, so all start identical."""
    if not is_distributed():
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
