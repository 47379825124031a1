"""course_lib.distributed and gradient accumulation (chapter 12): a step's global batch is
grad_accum_steps micro-batches, each from its own random stream, so one process accumulating and
torchrun's processes (2 CPU processes, gloo) draw the same batches and train to the same weights."""
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from course_lib import distributed
from course_lib.checkpoint import load_checkpoint, load_model
from course_lib.model import GPT
from course_lib.train import Trainer, TrainConfig
from model_helpers import DATA, TINY, assert_same_weights, tiny_trainer

ROOT = Path(__file__).resolve().parents[1]


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


# --- gradient accumulation -----------------------------------------------------------------


@pytest.mark.parametrize("micro, B", [(2, 3), (4, 2), (3, 5)])
def test_accumulation_is_the_gradient_of_the_big_batch(micro, B):
    g = torch.Generator().manual_seed(micro)
    batches = [(torch.randint(0, 11, (B, 8), generator=g),
                torch.randint(0, 11, (B, 8), generator=g))
               for _ in range(micro)]
    accumulating = tiny_trainer(grad_accum_steps=micro, batch_size=B)
    big = tiny_trainer(batch_size=micro * B)
    big.model.load_state_dict(accumulating.model.state_dict())
    loss_small = accumulating.forward_backward(batches)
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    loss_big = big.forward_backward([(x, y)])
    assert loss_small == pytest.approx(loss_big, rel=1e-6)
    small_grads, big_grads = grads(accumulating.model), grads(big.model)
    assert small_grads.keys() == big_grads.keys() == {n for n, _ in big.model.named_parameters()}
    for name in big_grads:
        torch.testing.assert_close(small_grads[name], big_grads[name], rtol=1e-5, atol=1e-7)


def test_each_micro_batch_has_its_own_stream():
    one, two = tiny_trainer(), tiny_trainer(grad_accum_steps=2)
    assert list(one.micro_batches) == [0] and list(two.micro_batches) == [0, 1]
    # micro-batch j's stream is seeded with seed + 1000 j: the first is a run without accumulation's
    expected = [torch.Generator().manual_seed(1337 + 1000 * j).get_state() for j in (0, 1)]
    assert torch.equal(one.generator.get_state(), expected[0])
    assert [torch.equal(g.get_state(), e) for g, e in zip(two.generators, expected)] == [True, True]
    assert (distributed.batch_stream_seed(1337, 0) == 1337
            and distributed.batch_stream_seed(1337, 2) == 3337)


def test_stream_states_and_restore_streams_round_trip():
    mine, generators = distributed.batch_streams(seed=5, grad_accum_steps=3)
    for g in generators:
        torch.rand(7, generator=g)  # the streams move on
    saved = distributed.stream_states(mine, generators)
    assert len(saved) == 3
    _, fresh = distributed.batch_streams(seed=5, grad_accum_steps=3)
    assert distributed.restore_streams(mine, fresh, saved, seed=99) is True
    assert [torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))
            for a, b in zip(generators, fresh)] == [True, True, True]
    # another number of micro-batches than saved: fresh streams seeded from the seed given
    _, two = distributed.batch_streams(seed=5, grad_accum_steps=2)
    assert distributed.restore_streams(range(2), two, saved, seed=99) is False
    assert torch.equal(two[1].get_state(), torch.Generator().manual_seed(99 + 1000).get_state())


def test_accumulation_run_resumes_exactly(tmp_path):
    full = tiny_trainer(grad_accum_steps=2)
    full.train()
    half = Trainer(GPT(TINY), DATA[:300], DATA[300:], replace(full.config), out_dir=tmp_path,
                   progress=False)
    torch.manual_seed(0)
    half.model.load_state_dict(GPT(TINY).state_dict())
    half.train(until=4)
    again = Trainer.resume(tmp_path / "ckpt.pt", train_data=DATA[:300], val_data=DATA[300:],
                           progress=False)
    assert len(load_checkpoint(tmp_path / "ckpt.pt")["rng"]["streams"]) == 2
    again.train()
    assert_same_weights(full.model, again.model)


def test_resuming_with_another_accumulation_says_the_streams_are_fresh(tmp_path, capsys):
    one = Trainer(GPT(TINY), DATA[:300], DATA[300:],
                  TrainConfig(max_iters=4, batch_size=4, eval_iters=1), out_dir=tmp_path,
                  progress=False, verbose=False)
    one.train(until=2)
    one.save()
    two = Trainer.resume(tmp_path / "ckpt.pt", train_data=DATA[:300], val_data=DATA[300:],
                         progress=False, config=replace(one.config, grad_accum_steps=2))
    assert (
        "the checkpoint has 1 batch stream(s), this run 2 micro-batches per step"
        in capsys.readouterr().out
    )
    # fresh streams, seeded from the run's seed plus the step it resumes at
    assert torch.equal(two.generators[1].get_state(),
                       torch.Generator().manual_seed(distributed.batch_stream_seed(1337 + 2,
                                                                                   1)).get_state())


def test_more_processes_than_micro_batches_is_a_clear_error():
    assert distributed.local_micro_batches(4, 2) == 2
    with pytest.raises(ValueError, match=r"grad_accum_steps \(1\) must be a multiple of the number "
                                         r"of processes \(2\).*--set grad_accum_steps=2"):
        distributed.local_micro_batches(1, 2)
    with pytest.raises(ValueError, match="grad_accum_steps=6"):
        distributed.local_micro_batches(7, 3)
    with pytest.raises(ValueError, match="grad_accum_steps must be an integer >= 1, got 0"):
        TrainConfig(grad_accum_steps=0)


def test_without_torchrun_there_is_one_process():
    assert not distributed.launched_by_torchrun() and distributed.launched_world_size() == 1
    assert (distributed.rank(), distributed.world_size(), distributed.is_main()) == (0, 1, True)
    assert distributed.setup("cpu") == "cpu" and not distributed.is_distributed()
    assert distributed.gather({"a": 1}) == [{"a": 1}] and distributed.average(2.5) == 2.5
    model = GPT(TINY)
    assert distributed.wrap(model, torch.device("cpu")) is model
    assert list(distributed.my_micro_batches(3)) == [0, 1, 2]


# --- torchrun: 2 processes on CPU (gloo) --------------------------------------------------------

TINY_RUN = ["--preset", "shakespeare-char-cpu", "--device", "cpu", "--set", "n_layer=1", "--set",
            "n_embd=32", "--set", "n_head=2", "--set", "block_size=16", "--set", "batch_size=4",
            "--set", "grad_accum_steps=2", "--set", "eval_interval=3", "--set", "eval_iters=2",
            "--set", "warmup_iters=2"]


def run(args, torchrun=False):
    # torchrun gives each worker 1 thread
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2"] if torchrun \
        else [sys.executable]
    # a session of its own, so that a hang kills torchrun's workers too
    process = subprocess.Popen(launcher + ["-m", "course_lib", "train", *TINY_RUN, *args], env=env,
                               text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail("the run did not finish in 300 s:\n" + stdout[-2000:] + stderr[-3000:])
    assert process.returncode == 0, stdout[-2000:] + stderr[-3000:]
    return stdout


def assert_close_checkpoints(a, b):
    """Data parallel adds the same gradients in another order than accumulation: close, not
    equal."""
    assert_same_weights(load_checkpoint(a)["model"], load_checkpoint(b)["model"], rtol=1e-5,
                        atol=1e-7)


@pytest.mark.slow  # starts torchrun three times
@pytest.mark.skipif(not torch.distributed.is_available()
                    or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available in this build of PyTorch")
def test_torchrun_two_processes_equal_one_process_with_accumulation(tmp_path):
    # one process, accumulating 2 micro-batches per step: the reference
    run(["--max-iters", "6", "--out", str(tmp_path / "single")])
    # 2 processes, one micro-batch each, from scratch
    out = run(["--max-iters", "6", "--out", str(tmp_path / "ddp")], torchrun=True)
    assert out.count("done in") == 1 and "x 2 processes" in out  # rank 0 alone prints
    assert_close_checkpoints(tmp_path / "single" / "ckpt.pt", tmp_path / "ddp" / "ckpt.pt")
    # a single-process checkpoint continued under torchrun (--resume), then loaded without DDP
    run(["--max-iters", "3", "--out", str(tmp_path / "half")])
    out = run(["--max-iters", "6", "--out", str(tmp_path / "half"), "--resume"], torchrun=True)
    assert "resuming" in out and "at step 3 of 6" in out
    assert_close_checkpoints(tmp_path / "single" / "ckpt.pt", tmp_path / "half" / "ckpt.pt")
    model, ckpt = load_model(tmp_path / "ddp" / "ckpt.pt")  # written under DDP, loaded without it
    assert ckpt["step"] == 6 and not any(k.startswith("module.") for k in ckpt["model"])
    assert load_checkpoint(tmp_path / "ddp" / "ckpt.pt")["history"]["loss"] == \
        pytest.approx(load_checkpoint(tmp_path / "single" / "ckpt.pt")["history"]["loss"], rel=1e-5)
