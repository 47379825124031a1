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


def ptq_point(method: str, bits: int, granularity: str) -> dict:
    record = json.loads((RECORDS / "quantize.json").read_text())
    key = (method, bits, granularity, "int8")
    return next(r for r in record["ptq"]
                if (r["method"], r["bits"], r["granularity"], r["embeddings"]) == key)


def test_the_calibration_draws_start_with_the_records_draw():
    """quantize_calibration.json (chapter 23's spread over GPTQ's calibration draws): seed 0 is
    the draw of quantize.json, so its points are that record's, bitwise; 4 draws each."""
    record = json.loads((RECORDS / "quantize_calibration.json").read_text())
    assert record["val_windows"] == 1742 and record["calibration_windows"] == 128
    for bits, granularity in ((3, "row"), (3, "group"), (4, "group")):
        draws = {r["calibration_seed"]: r for r in record["calibration_draws"]
                 if (r["bits"], r["granularity"]) == (bits, granularity)}
        assert set(draws) == {0, 1, 2, 3}
        assert draws[0]["delta_bpc"] == ptq_point("gptq", bits, granularity)["delta_bpc"]


def test_the_whole_model_comparison_scores_our_gptq_as_the_chapter_does():
    """gptq_reference.json's whole-model rows: ours is quantize.json's GPTQ point, bitwise; the
    reference is run at blocks of 32 and 128 with our grid and at 128 with its own."""
    record = json.loads((RECORDS / "gptq_reference.json").read_text())
    rows = record["whole_model"]
    assert record["val_windows"] == 1742
    for bits in (3, 4):
        ours = [r for r in rows if (r["bits"], r["program"]) == (bits, "ours")]
        assert len(ours) == 1
        assert ours[0]["delta_bpc"] == ptq_point("gptq", bits, "group")["delta_bpc"]
        assert {(r["block_size"], r["grid"]) for r in rows
                if (r["bits"], r["program"]) == (bits, "reference")} == {
                    (32, "shared"), (128, "shared"), (128, "theirs")}


def test_the_asymmetric_record_pairs_each_zero_point_grid_with_the_charts_symmetric_point():
    """quantize_asym.json (chapter 23's symmetric against asymmetric RTN at model scale): its
    symmetric rows are quantize.json's RTN points, bitwise; each asymmetric one stores more bytes
    by exactly its zero points and carries its paired difference with the symmetric one."""
    record = json.loads((RECORDS / "quantize_asym.json").read_text())
    assert record["val_windows"] == 1742
    rows = {(r["bits"], r["granularity"], r["symmetric"]): r for r in record["asym"]}
    assert set(rows) == {(b, g, s) for b in (3, 4) for g in ("row", "group")
                         for s in (True, False)}
    for bits in (3, 4):
        for granularity in ("row", "group"):
            sym, asym = rows[bits, granularity, True], rows[bits, granularity, False]
            assert sym["delta_bpc"] == ptq_point("rtn", bits, granularity)["delta_bpc"]
            assert sym["zero_point_bytes"] == 0 < asym["zero_point_bytes"]
            assert asym["bytes"] - sym["bytes"] == asym["zero_point_bytes"]
            lo, hi = asym["minus_sym_ci"]
            assert lo <= asym["minus_sym_bpc"] <= hi


def test_qat_at_int6_and_int8_trains_the_int3_records_controls():
    """quantize_qat_int6_int8.json: 3 seeds of QAT and its control at 6 and 8 bits; the controls'
    float weights are bitwise those of quantize_qat.json (the same fine-tunes), so chapter 23 can
    read the rounding cost at every width against one float model per seed."""
    record, _ = rows("quantize_qat_int6_int8.json")
    _, int3 = rows("quantize_qat.json")
    assert record["val_windows"] == 1742
    assert [r["bits"] for r in record["rtn_reference"]] == [6, 8]
    for bits in (6, 8):
        by = {(r["method"], r["seed"]): r for r in record["qat"] if r["bits"] == bits}
        assert set(by) == {(m, s) for m in ("qat", "fine-tune then rtn") for s in (0, 1, 2)}
        for seed in (0, 1, 2):
            control = by["fine-tune then rtn", seed]
            assert control["float_bpc"] == int3["fine-tune then rtn", seed]["float_bpc"]
            assert control["steps"] == by["qat", seed]["steps"] == 200
