"""Which backward glue and gradient accumulation each validation run's framework code runs (studies.validation)."""

import pytest

from c3kit.studies.validation import glue_of, grad_acc_of
from c3kit.workload.layer import GLUE, GRAD_ACC


def test_glue_by_framework():
    assert glue_of("NeMo (Megatron-Core, Transformer Engine)") == "fused"
    assert glue_of("Megatron-Bridge (Megatron-Core, Transformer Engine)") == "fused"
    assert glue_of("Megatron-LM (NeMo)") == "fused"
    assert glue_of("Megatron-LM") == "split"  # 2021-2022: split_tensor_along_last_dim of the fused QKV
    assert glue_of("llm-foundry (Composer, PyTorch FSDP)") == "split"  # Wqkv output split
    assert glue_of("torchtitan (FSDP2)", "eager") == "separate"
    assert glue_of("torchtitan (FSDP2)", "fused") == "fused"  # torch.compile rows
    assert glue_of("something else") in GLUE


def test_grad_acc_by_framework_and_year():
    assert grad_acc_of("Megatron-LM", "Narayanan et al. 2021, Efficient Large-Scale ...") == "every"
    assert grad_acc_of("Megatron-LM", "Korthikanti et al. 2022, Reducing Activation ...") == "none"
    assert grad_acc_of("NeMo (Megatron-Core, Transformer Engine)", "NVIDIA NeMo 24.07") == "none"
    assert grad_acc_of("Megatron-DeepSpeed", "Smith et al. 2022") == ""  # the description's default
    assert grad_acc_of("torchtitan (FSDP2)", "PyTorch torchtitan") == ""
    assert all(grad_acc_of(f, s) in GRAD_ACC + ("",) for f in ("Megatron-LM", "x") for s in ("2021", "2024"))


def test_every_run_gets_a_valid_choice():
    from c3kit.studies.validation import load_runs, norm_rope_of

    df = load_runs()
    for _, row in df.iterrows():
        assert glue_of(row["framework"], norm_rope_of(str(row["run"]))) in GLUE
        assert grad_acc_of(row["framework"], row["source"]) in GRAD_ACC + ("",)


def test_fsdp_sync_by_framework_and_layout():
    from c3kit.studies.validation import fsdp_sync_of, load_runs, run_objects

    assert fsdp_sync_of("torchtitan (FSDP2)", 8, True) == "step"  # apply_fsdp: reshard_after_forward=False with PP
    assert fsdp_sync_of("torchtitan (FSDP2)", 1, True) == "micro"
    assert fsdp_sync_of("torchtitan (FSDP2)", 8, False) == "micro"
    assert fsdp_sync_of("llm-foundry (Composer, PyTorch FSDP)", 4, True) == "micro"
    assert grad_acc_of("torchtitan (FSDP2)", "PyTorch torchtitan", "step") == "micro"  # FSDP2's unsharded adds
    df = load_runs()
    steps = []
    for _, row in df.iterrows():
        try:
            _, par = run_objects(row)
        except Exception:  # a layout the model cannot express is listed elsewhere
            continue
        if par.fsdp_sync == "step":
            steps.append(row["run"])
            assert "torchtitan" in row["framework"] and par.pp > 1 and par.fsdp
    assert "torchtitan-h100-t5-405b-3d-1f1b" in steps and "torchtitan-h100-t5-405b-3d-interleaved" in steps


def test_train_metrics_by_framework():
    from c3kit.studies.validation import train_metrics_of

    assert train_metrics_of("llm-foundry (Composer, PyTorch FSDP)") == 2  # LanguageCrossEntropy + LanguagePerplexity
    assert train_metrics_of("torchtitan (FSDP2)") == 0
    assert train_metrics_of("NeMo (Megatron-Core, Transformer Engine)") == 0
    assert train_metrics_of("Megatron-LM") == 0


def test_train_metrics_show_in_the_breakdown_and_sum_to_the_step():
    from c3kit.studies.validation import load_runs, predict

    df = load_runs()
    row = df[df["run"] == "mpt-125m-a100-bf16-s2048-g8"].iloc[0]
    p = predict(row)
    assert p["overhead.train_metrics"] > 0
    parts = p["compute_s"] + p["exposed_s"] + p["bubble_s"] + sum(v for k, v in p.items() if k.startswith("overhead."))
    assert parts == pytest.approx(p["predicted_s"], rel=1e-9)
    row = df[df["run"] == "torchtitan-h100-t1-8b-fsdp"].iloc[0]
    assert "overhead.train_metrics" not in predict(row)


def test_cp_impl_by_framework_and_breakdown():
    from c3kit.studies.validation import cp_impl_of, load_runs, predict, run_objects

    assert cp_impl_of("torchtitan (FSDP2)") == "torch"
    assert cp_impl_of("NeMo (Megatron-Core, Transformer Engine)") == "ring"
    df = load_runs()
    row = df[df["run"] == "torchtitan-h100-t2-8b-s128k-cp4"].iloc[0]
    assert run_objects(row)[1].cp_impl == "torch"
    p = predict(row)
    assert p["overhead.cp_merge"] > 0
    parts = p["compute_s"] + p["exposed_s"] + p["bubble_s"] + sum(v for k, v in p.items() if k.startswith("overhead."))
    assert parts == pytest.approx(p["predicted_s"], rel=1e-9)
    row = df[df["run"] == "nemo2407-h100-fp8-llama3-8b-cp2"].iloc[0]
    assert run_objects(row)[1].cp_impl == "ring" and "overhead.cp_merge" not in predict(row)


def test_flat_param_grads_by_framework():
    from c3kit.studies.validation import flat_param_grads_of

    assert flat_param_grads_of("llm-foundry (Composer, PyTorch FSDP)", True)
    assert not flat_param_grads_of("llm-foundry (Composer, PyTorch FSDP)", False)
    assert not flat_param_grads_of("torchtitan (FSDP2)", True)
    assert not flat_param_grads_of("Megatron-Bridge (Megatron-Core, Transformer Engine)", True)


def test_loss_kernel_by_framework():
    from c3kit.studies.validation import loss_kernel_of

    # ComposerMPTCausalLM / ComposerMosaicGPT: loss_fn 'fused_crossentropy' by default (flash-attn xentropy)
    assert loss_kernel_of("llm-foundry (Composer, PyTorch FSDP)") == "xentropy"
    assert loss_kernel_of("torchtitan (FSDP2)") == "eager"
    assert loss_kernel_of("Megatron-LM") == "eager"


def test_llm_foundry_loss_is_priced_as_xentropy(monkeypatch):
    from c3kit.studies import validation as v

    runs = v.load_runs()
    row = runs[runs["run"] == "mpt-760m-h100-bf16-s2048-g8"].iloc[0]
    fused = v.predict(row)["predicted_s"]
    monkeypatch.setattr(v, "loss_kernel_of", lambda framework: "eager")
    assert fused < v.predict(row)["predicted_s"]


def test_bias_grads_by_framework_and_dtype():
    from c3kit.studies.validation import bias_grads_of

    assert bias_grads_of("llm-foundry (Composer, PyTorch FSDP)", "bf16")
    assert not bias_grads_of("llm-foundry (Composer, PyTorch FSDP)", "fp8")  # TE Linear fuses bgrad into its cast
    assert not bias_grads_of("Megatron-LM", "bf16")  # its bias code is not described here


def test_metrics_fp32_by_framework_and_dtype():
    from c3kit.studies.validation import metrics_fp32_of

    assert metrics_fp32_of("llm-foundry (Composer, PyTorch FSDP)", "bf16")  # torch.autocast(bfloat16) upcasts
    assert not metrics_fp32_of("llm-foundry (Composer, PyTorch FSDP)", "fp8")  # te.fp8_autocast only
    assert metrics_fp32_of("torchtitan (FSDP2)", "fp8")
