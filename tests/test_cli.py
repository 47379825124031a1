import torch

from course_lib.cli import main


def test_params_prints_the_breakdown_and_total(capsys):
    assert main(["params", "--preset", "gpt2-small"]) == 0
    out = capsys.readouterr().out
    assert "124,439,808" in out and "attention" in out and "MLP" in out


def test_unknown_preset_is_a_clear_error(capsys):
    assert main(["params", "--preset", "gpt5"]) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'gpt5'" in err and "shakespeare-char-cpu" in err


def test_train_then_sample_then_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--preset", "shakespeare-char-cpu", "--max-iters", "3", "--out", str(out),
                 "--device", "cpu"]) == 0
    assert (out / "ckpt.pt").exists()
    # Running again must not overwrite the run ...
    assert main(["train", "--preset", "shakespeare-char-cpu", "--max-iters", "3", "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    # ... but can continue it.
    assert main(["train", "--preset", "shakespeare-char-cpu", "--max-iters", "5", "--out", str(out),
                 "--resume", "--device", "cpu"]) == 0
    assert "resuming" in capsys.readouterr().out
    assert torch.load(out / "ckpt.pt", weights_only=True)["step"] == 5
    assert main(["sample", "--checkpoint", str(out / "ckpt.pt"), "--prompt", "ROMEO:", "--tokens", "20",
                 "--top-k", "5", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_sample_rejects_bad_arguments_and_missing_checkpoints(tmp_path, capsys):
    assert main(["sample", "--checkpoint", str(tmp_path / "missing.pt")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
    assert main(["sample", "--checkpoint", str(tmp_path / "missing.pt"), "--top-p", "2"]) == 2
    assert "top_p must be in (0, 1]" in capsys.readouterr().err


def test_counting_preset_cannot_be_trained(capsys):
    assert main(["train", "--preset", "gpt2-small"]) == 2
    assert "counting parameters only" in capsys.readouterr().err
