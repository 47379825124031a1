"""One figure for one run: the CPU preset's full-run val loss is recorded once
(course_lib.presets.CPU_PRESET_VAL_LOSS, measured by benchmarks/train_shakespeare_cpu.py) and every
place that quotes it quotes that value; chapter 13 prints it from the constant instead of pasting it."""
import json
import re

from course_lib.presets import CPU_PRESET_VAL_LOSS
from course_lib.tools.chapters import ROOT

FIGURE = f"{CPU_PRESET_VAL_LOSS}"


def test_the_readme_and_the_benchmark_quote_the_recorded_figure():
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `train_shakespeare_cpu.py`"))
    assert f"val loss {FIGURE}" in row, row
    assert FIGURE in (ROOT / "benchmarks" / "train_shakespeare_cpu.py").read_text()


def test_chapter_13_prints_the_constant_and_pastes_no_other_figure():
    nb = json.loads((ROOT / "book" / "ch13_gpt2_weights.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "CPU_PRESET_VAL_LOSS" in code
    # a pasted val loss such as 1.875 next to "val loss" would be a second figure for the same run
    assert not re.search(r"val loss \d\.\d{2,3} nats", code), "print CPU_PRESET_VAL_LOSS, do not paste it"
    outputs = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                      for o in c.get("outputs", []))
    assert f"val loss {FIGURE} nats" in outputs
