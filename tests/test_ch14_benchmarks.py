"""Chapter 14's benchmarks share one set-up (benchmarks/ch14_setup.py): a run of the CPU preset
built by course_lib.runs. It must train exactly what the benchmarks built inline before it (the
stored records were made that way), and its fixed validation batches must not depend on the run."""
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import torch

from course_lib import GPT
from course_lib.data import get_batch, load_text, train_val_split
from course_lib.presets import get_preset
from course_lib.tokenizers import CharTokenizer
from course_lib.train import Trainer
from course_lib.utils import seed_everything

ROOT = Path(__file__).resolve().parent.parent


def load_setup():
    spec = importlib.util.spec_from_file_location("ch14_setup",
                                                  ROOT / "benchmarks" / "ch14_setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inline_run(steps, seed, options):
    """What ablation_ch14.py did before the shared set-up, line for line."""
    text = load_text("tinyshakespeare")
    tok = CharTokenizer.from_text(text)
    train_data, val_data = train_val_split(torch.tensor(tok.encode(text), dtype=torch.long))
    preset = get_preset("shakespeare-char-cpu")
    base = replace(preset.model, vocab_size=tok.vocab_size)
    train_config = replace(preset.train, max_iters=steps, warmup_iters=max(1, steps // 10),
                           eval_interval=steps, eval_iters=1, seed=seed)
    seed_everything(seed)
    model = GPT(replace(base, **options))
    Trainer(model, train_data, val_data, train_config, progress=False, verbose=False).train()
    return model, val_data


def test_shared_setup_trains_what_the_benchmarks_built_inline():
    setup = load_setup()
    options = dict(rope_theta=10000.0, n_kv_head=2)
    run = setup.start_cpu_run(3, 1, options)
    run.trainer.train()
    model, val_data = inline_run(3, 1, options)
    assert run.trainer.model.config == model.config
    assert run.trainer.config.warmup_iters == 1 and run.trainer.config.seed == 1
    assert torch.equal(run.val_data, val_data)
    for (name, a), (_, b) in zip(run.trainer.model.state_dict().items(),
                                 model.state_dict().items()):
        assert torch.equal(a, b), name


def test_validation_batches_are_fixed_by_their_own_generator():
    setup = load_setup()
    val_data = torch.arange(1000)
    torch.manual_seed(0)
    first = setup.validation_batches(val_data, 16, 4, 3)
    torch.manual_seed(123)  # the global generator plays no part
    second = setup.validation_batches(val_data, 16, 4, 3)
    generator = torch.Generator().manual_seed(2024)
    expected = [get_batch(val_data, 16, 4, generator) for _ in range(3)]
    for (x1, y1), (x2, y2), (x3, y3) in zip(first, second, expected):
        assert x1.shape == (4, 16) and torch.equal(x1, x2) and torch.equal(x1, x3)
        assert torch.equal(y1, y2) and torch.equal(y1, y3) and torch.equal(x1[:, 1:], y1[:, :-1])


def test_write_record_is_atomic_and_names_its_command_and_commit(tmp_path):
    setup = load_setup()
    out = tmp_path / "record.json"
    args = setup.argparse.Namespace(json=str(out), host_env=False)
    setup.write_record(args, "ablation_ch14.py", ["--seeds", "0", "--json", "x.json"], {"runs": {}})
    record = json.loads(out.read_text())
    assert record["command"] == "python benchmarks/ablation_ch14.py --seeds 0 --json x.json"
    assert record["runs"] == {} and "load_average_at_end" in record
    assert record["commit"] is None or len(record["commit"].split("+")[0]) >= 7
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]  # no partial file left


def test_norm_speed_traces_what_each_norm_runs():
    spec = importlib.util.spec_from_file_location("norm_speed",
                                                  ROOT / "benchmarks" / "norm_speed.py")
    norm_speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(norm_speed)
    x, w = torch.randn(2, 4, 8), torch.ones(8)
    with torch.no_grad():
        layer_norm = norm_speed.aten_trace(lambda: torch.nn.functional.layer_norm(x, (8,), w, None,
                                                                                  1e-5))
        written_out = norm_speed.aten_trace(
            lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
        )
    assert layer_norm == ["aten::layer_norm > aten::native_layer_norm"]
    assert written_out == ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul",
                           "aten::mul"]
