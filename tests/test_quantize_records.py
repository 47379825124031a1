"""The QAT records that book/measured.md quotes beside chapter 23's (benchmarks/quantize.py): QAT at
int4, and GPTQ on the int3 controls' float weights, whose rows are paired by seed with
quantize_qat.json's QAT runs; the pairing holds because the controls are the same fine-tunes."""
import json

from benchmark_loader import ROOT

RECORDS = ROOT / "course_lib" / "records"


def rows(name: str) -> dict:
    record = json.loads((RECORDS / name).read_text())
    return record, {(r["method"], r["seed"]): r for r in record["qat"]}


def test_the_int3_controls_quantized_by_gptq_are_the_controls_of_the_qat_record():
    qat, qat_rows = rows("quantize_qat.json")
    gptq, gptq_rows = rows("quantize_qat_control_gptq.json")
    assert gptq["val_windows"] == qat["val_windows"] == 1742
    for seed in (0, 1, 2):
        ours, theirs = gptq_rows["fine-tune then rtn", seed], qat_rows["fine-tune then rtn", seed]
        assert ours["delta_bpc"] == theirs["delta_bpc"]  # bitwise the same fine-tune
        assert ours["float_bpc"] == theirs["float_bpc"] and ours["steps"] == theirs["steps"]
        assert gptq_rows["fine-tune then gptq", seed]["bytes"] == qat_rows["qat", seed]["bytes"]


def test_qat_at_int4_has_three_seeds_of_each_arm_on_the_same_windows():
    record, by = rows("quantize_qat_int4.json")
    assert record["val_windows"] == 1742 and record["rtn_reference"][0]["bits"] == 4
    for method in ("qat", "fine-tune then rtn", "fine-tune then gptq"):
        assert {s for m, s in by if m == method} == {0, 1, 2}
        assert {r["bits"] for (m, _), r in by.items() if m == method} == {4}
