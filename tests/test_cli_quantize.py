"""``python -m course_lib quantize`` and ``qat`` (chapter 23): a GPT checkpoint into a gpt-int4 one
that ``sample`` and ``eval`` read, by RTN and GPTQ; a QAT run, then its 4-bit checkpoint. The bad
inputs are rows of tests/test_bad_input_cli.py."""
import pytest
import torch

from course_lib.checkpoint import load_checkpoint, load_model
from course_lib.cli import main
from course_lib.data import load_text
from course_lib.quantize.apply import quantize_gptq, quantize_rtn
from course_lib.quantize.convert import calibration_windows
from course_lib.quantize.models import QATGPT, QuantizedGPT
from course_lib.quantize.rtn import QuantConfig
from model_helpers import pretrain_tiny_gpt

G32 = QuantConfig(bits=4, granularity="group", group_size=32)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quantize")
    (tmp / "text.txt").write_text(load_text()[:20_000])
    return pretrain_tiny_gpt(tmp / "base", max_iters=2), tmp


@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_quantize_writes_a_checkpoint_that_computes_what_the_library_computes(base, method, capsys):
    ckpt, tmp = base
    out = tmp / f"{method}.pt"
    before = ckpt.read_bytes()
    assert main(["quantize", str(ckpt), "--bits", "4", "--method", method, "--group-size", "32",
                 "--text", str(tmp / "text.txt"), "--calibration", "8", "--out", str(out)]) == 0
    assert (f"wrote {out}: int4 per group of 32 (symmetric) by {method}, embeddings int8"
            in capsys.readouterr().out)
    assert ckpt.read_bytes() == before  # the input is untouched
    model, stored_ckpt = load_model(out)
    assert isinstance(model, QuantizedGPT) and stored_ckpt["trained_on"]["method"] == method
    gpt, gpt_ckpt = load_model(ckpt)
    if method == "rtn":
        reference, _ = quantize_rtn(gpt, G32)
    else:
        from course_lib.checkpoint import load_tokenizer
        windows = calibration_windows(load_tokenizer(gpt_ckpt, ckpt), load_text()[:20_000], 48, 8)
        reference, _ = quantize_gptq(gpt.eval(), G32, windows)
    x = torch.randint(0, gpt.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, got = reference(x)[0], model.eval()(x)[0]
    # the kernel's float32 sums in another order
    assert (got - ref).abs().max() <= 1e-5 * ref.abs().max()


def test_sample_and_eval_read_the_quantized_checkpoint(base, capsys):
    ckpt, tmp = base
    out = tmp / "for-sample.pt"
    assert main(["quantize", "--checkpoint", str(ckpt), "--asymmetric",
                 "--embeddings", "fp16", "--out", str(out)]) == 0
    # the checkpoint also given as an option (as sample takes it)
    assert "embeddings fp16" in capsys.readouterr().out
    model, _ = load_model(out)
    assert model.config.embeddings == "fp16" and model.wte.codes.dtype == torch.float16
    assert main(["sample", "--checkpoint", str(out), "--prompt",
                 "ROMEO:", "--tokens", "12", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")
    assert main(["eval", "--checkpoint", str(out), "--tasks",
                 "next-line", "--limit", "2", "--device", "cpu"]) == 0
    assert "next-line" in capsys.readouterr().out


@pytest.mark.slow  # a QAT run of 2 steps, then its 4-bit checkpoint (about 10 s on 2 cores)
def test_a_qat_run_then_its_four_bit_checkpoint(base, capsys):
    ckpt, tmp = base
    run = tmp / "qat"
    assert main(["qat", "--checkpoint", str(ckpt), "--text", str(tmp / "text.txt"), "--bits", "4",
                 "--group-size", "32", "--max-iters", "2", "--set", "batch_size=4", "--set",
                 "eval_iters=1", "--out", str(run), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "quantization-aware training, int4 per group of 32" in printed
    assert "python -m course_lib quantize" in printed
    model, saved = load_model(run / "ckpt.pt")
    assert isinstance(model, QATGPT) and saved["trained_on"]["command"] == "qat"
    assert main(["quantize", str(run / "ckpt.pt"), "--out", str(tmp / "qat-int4.pt")]) == 0
    int4, _ = load_model(tmp / "qat-int4.pt")
    x = torch.randint(0, model.config.vocab_size, (2, 48))
    with torch.no_grad():  # the 4-bit model computes what the QAT model's forward pass computed
        largest = model.eval()(x)[0].abs().max()
        assert (int4.eval()(x)[0] - model.eval()(x)[0]).abs().max() <= 1e-5 * largest
    trained_on = load_checkpoint(tmp / "qat-int4.pt")["trained_on"]
    assert trained_on["base_checkpoint"] == str((run / "ckpt.pt").resolve())
