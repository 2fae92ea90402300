"""Validation dataset and scoring: integrity, conversions, not-modelled runs, statistics."""

import numpy as np
import pandas as pd
import pytest

from c3kit.errors import StudyError
from c3kit.studies.validation import (
    error_stats, load_runs, measured_step_time, narayanan_step_time, palm_step_time, run_objects, unmodelled, validate)


@pytest.fixture(scope="module")
def runs():
    return load_runs()


@pytest.fixture(scope="module")
def result(runs):
    return validate(runs=runs)


def test_dataset_covers_what_the_issue_asks(runs):
    assert len(runs) >= 40
    assert runs["source"].str.split(",").str[0].nunique() >= 5
    assert {"A100-SXM-80G", "H100-SXM", "B200"} <= set(runs["gpu"])
    assert {"bf16", "fp8"} <= set(runs["dtype"])
    assert (runs["n_experts"] > 1).any() and (runs["n_experts"] == 1).any()
    assert (runs["fsdp"] == 1).any() and (runs["fsdp"] == 0).any()
    assert (runs["cp"] > 1).any()
    assert runs["url"].str.startswith("https://").all()
    assert (runs["formula"].str.len() > 0).all() and (runs["measured_s"] > 0).all()


def test_layouts_are_consistent(runs):
    for _, row in runs.iterrows():
        assert row["tp"] * row["pp"] * row["cp"] * row["dp"] == row["gpus"], row["run"]
        assert row["global_batch"] % (row["dp"] * row["micro_batch"]) == 0, row["run"]
        if not unmodelled(row) and row["layers"] % (row["pp"] * row["vpp"]) == 0:
            m, p = run_objects(row)
            assert p.gpus == row["gpus"]


def test_narayanan_conversion(runs):
    one_t = runs[runs["run"] == "narayanan-1t"]
    # 96 B s l h^2 (1 + s/6h + V/16lh) / (163 TFLOP/s x 3072 GPUs)
    b, s, l, h, v = 3072, 2048, 128, 25600, 51200
    f = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    assert narayanan_step_time(one_t)[0] == pytest.approx(f / (163e12 * 3072))


def test_token_conversions(runs):
    r = runs.set_index("run")
    # llm-foundry: 2048 sequences x 2048 tokens at 26274 tokens/s (all GPUs)
    assert r.loc["mpt-70b-a100-bf16-s2048-g64", "measured_s"] == pytest.approx(2048 * 2048 / 26274)
    # torchtitan: global batch 16 x 8192 tokens at 5762 tokens/s/GPU on 8 GPUs
    assert r.loc["torchtitan-h100-t1-8b-fsdp", "measured_s"] == pytest.approx(16 * 8192 / (5762 * 8))
    assert r.loc["mtnlg-530b-2240", "measured_s"] == 60.1


def test_palm_conversion(runs):
    row = runs[runs["run"] == "llama3-405b-8192"]
    n = 126 * (16384 * (16384 + 2 * 1024) + 16384 * 16384 + 3 * 16384 * 53248 + 2 * 16384) + 128256 * 16384 + 16384
    per_token = 6 * n + 12 * 126 * 16384 * 8192
    assert palm_step_time(row)[0] == pytest.approx(per_token * 2048 * 8192 / (430e12 * 8192))


def test_unknown_measure_is_rejected(runs, tmp_path):
    bad = runs.drop(columns="measured_s").head(2).copy()
    bad.loc[bad.index[0], "measured_what"] = "vibes"
    f = tmp_path / "r.csv"
    bad.to_csv(f, index=False)
    with pytest.raises(StudyError, match="measured_what"):
        load_runs(f)


def test_not_modelled_runs_are_listed_not_dropped(runs, result):
    assert len(result.table) == len(runs)
    # context parallelism is modelled since Parallelism has cp: CP runs are scored unless they lack another feature
    cp = result.table[runs["cp"].to_numpy() > 1]
    assert len(cp) and (cp["status"] == "scored").any()
    assert not cp["status"].str.contains("context parallelism").any()
    skipped = result.table[result.table["status"] != "scored"]
    assert skipped["status"].str.startswith("not modelled").all()
    assert result.scored["predicted_s"].notna().all() and result.skipped["predicted_s"].isna().all()
    assert len(result.scored) + len(result.skipped) == len(runs)


def test_a_layout_the_model_rejects_is_listed_as_not_modelled(runs):
    # 126 layers on pp 8 x vpp 2 with Megatron-Core's even split: the framework itself would refuse
    row = runs[runs["run"] == "torchtitan-h100-t5-405b-3d-interleaved"].copy()
    row["run"] = "interleaved-even-split"
    res = validate(runs=row)
    assert len(res.scored) == 0 and len(res.skipped) == 1
    assert res.skipped["status"].iloc[0].startswith("not modelled") and "pp 8 x vpp 2" in res.skipped["status"].iloc[0]


def test_uneven_interleaved_405b_runs_are_scored(result):
    # issue 13: 126 layers over pp 8 x vpp 2 (torchtitan) and pp 8 x vpp 8 (Megatron-Bridge, embedding/loss split)
    for run in ("torchtitan-h100-t5-405b-3d-interleaved", "mbridge2511-h100-llama3.1-405b-cp2",
                "mbridge2602-h100-llama3.1-405b-cp2"):
        row = result.table[result.table["run"] == run].iloc[0]
        assert row["status"] == "scored" and row["predicted_s"] > 0 and row["bubble_s"] > 0, run


def test_llama3_runs_use_the_papers_pipeline_schedule(runs, result):
    # Llama 3 Sec. 3.3.2: interleaved chunks of one slot (vpp 8 on pp 16), one layer fewer on the first and last rank,
    # no activation checkpointing at 8K; bubble (pp - 1) / vpp micro-batches of the fullest rank, not pp - 1
    for run in ("llama3-405b-8192", "llama3-405b-16384", "llama3-405b-16384-cp16"):
        m, p = run_objects(runs[runs["run"] == run].iloc[0])
        assert (p.pp, p.vpp, p.pp_split, p.recompute) == (16, 8, "llama3", "none"), run
        assert p.rank_layers(m.layers) == (7,) + (8,) * 14 + (7,)
        row = result.table[result.table["run"] == run].iloc[0]
        assert row["status"] == "scored" and 0 < row["bubble_s"] < 0.15 * row["predicted_s"], run


def test_op_basis_labels_and_the_datasheet_basis_is_optimistic_where_measured(runs, result):
    import dataclasses

    from c3kit.hw import get_gpu
    from c3kit.studies.validation import op_basis_of, predict

    assert op_basis_of("B200") == op_basis_of("A100-SXM-80G") == "published microbenchmark, partly datasheet"
    assert op_basis_of("H100-SXM") == "transferred from H200-SXM"
    assert op_basis_of("H100-SXM-96G-500W") == "transferred from H200-SXM, partly datasheet"
    t = result.table
    assert set(t.loc[t["gpu"] == "B200", "op_basis"]) == {"published microbenchmark, partly datasheet"}
    assert "op_basis" in set(result.by_group()["group"])
    # the same H100 FP8 step priced from the datasheet (a GPU name with no measurement or transfer) is faster than
    # on its measured basis: the label on datasheet-basis runs says which way their errors lean
    row = runs[runs["run"] == "nemo2407-h100-fp8-llama2-7b"].iloc[0]
    h100 = get_gpu("H100-SXM")
    sheet = dataclasses.replace(h100, name="H100-SXM-datasheet-only")
    assert op_basis_of(sheet.name) == "datasheet"
    assert predict(row, gpu=sheet)["predicted_s"] < 0.9 * predict(row, gpu=h100)["predicted_s"]


def test_zero2_rows_map_to_parallelism_zero2(runs):
    row = runs[runs["run"] == "nemo2407-h100-fp8-llama2-7b"].iloc[0].copy()
    assert int(row["dp"]) > 1 and not int(row["fsdp"])
    row["zero"] = 2
    assert unmodelled(row) == []
    _, p = run_objects(row)
    assert p.zero2 and p.dist_optimizer
    row["zero"] = 1
    assert not run_objects(row)[1].zero2


def test_statistics_hand_checked():
    s = error_stats(pd.Series([0.1, -0.3, 0.05]))
    assert s["runs"] == 3
    assert s["mae"] == pytest.approx(0.15)
    assert s["median"] == pytest.approx(0.1)
    assert s["worst"] == pytest.approx(-0.3)
    assert s["bias"] == pytest.approx(-0.05)


def test_groups_cover_every_scored_run(result):
    g = result.by_group()
    for name in ("gpu", "framework_family", "dtype", "kind"):
        assert g[g["group"] == name]["runs"].sum() == len(result.scored)
    o = result.overall()
    assert o["mae"] == pytest.approx(float(np.mean(np.abs(result.scored["error"]))))


def test_no_overlap_adds_hidden_dp_comm(runs):
    row = runs[runs["run"] == "nemo2407-h100-fp8-gpt3-5b"].copy()  # Megatron-Core: overlapped unless stated
    b = validate(runs=row).table.iloc[0]
    row["dp_overlap"] = 0
    a = validate(runs=row).table.iloc[0]
    assert a["predicted_s"] > b["predicted_s"]
    assert a["exposed_s"] - b["exposed_s"] == pytest.approx(a["predicted_s"] - b["predicted_s"])


def test_dp_overlap_facts():
    from c3kit.studies.validation import dp_overlap_of

    assert not dp_overlap_of("Megatron-LM", "Narayanan et al. 2021, Efficient Large-Scale ...")
    assert not dp_overlap_of("Megatron-LM", "Korthikanti et al. 2022, Reducing Activation ...")
    assert not dp_overlap_of("Megatron-DeepSpeed", "Smith et al. 2022 (MT-NLG)")
    assert dp_overlap_of("Megatron-LM (NeMo)", "NVIDIA Nemotron-4 340B Technical Report, 2024")
    assert dp_overlap_of("NeMo (Megatron-Core, Transformer Engine)", "NVIDIA NeMo 24.07 performance summary")
    assert dp_overlap_of("Megatron-LM", "a 2024 report")
    assert dp_overlap_of("Megatron-DeepSpeed", "any", fsdp=True)  # FSDP reduce-scatters in its hooks


def test_pp_options_table_and_runs(runs):
    from c3kit.studies.validation import layout_of, pp_options, pp_p2p_overlap_of

    t = pp_options()
    assert set(t["p2p_overlap"].astype(str)) <= {"0", "1"} and all(str(s).startswith("https://") for s in t["source"])
    assert pp_p2p_overlap_of("nemo2407-h100-fp8-gpt3-175b-128") and pp_p2p_overlap_of("mbridge2602-h100-llama3-70b")
    assert not pp_p2p_overlap_of("narayanan-530b") and not pp_p2p_overlap_of("torchtitan-h100-t5-405b-3d-1f1b")
    for _, row in runs.iterrows():  # every run set from the table is interleaved, as the recipes require
        p = layout_of(row)
        if p.pp_p2p_overlap:
            assert p.pp > 1 and p.vpp > 1, row["run"]


def test_measured_formula_of_an_empty_frame():
    assert len(measured_step_time(load_runs().head(0))) == 0


def test_bad_runs_file(tmp_path):
    bad = tmp_path / "runs.csv"
    bad.write_text("run,gpu\nx,A100\n")
    with pytest.raises(StudyError):
        load_runs(bad)
