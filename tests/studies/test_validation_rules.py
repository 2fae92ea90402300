"""The no-fitting rule: validation scores with exactly the model `c3kit analyze` uses, and nothing is fitted.

Published step times are for scoring only. These tests fail if a tuning constant appears in the
validation module, if predictions depend on the measured figures, or if `validate` and `analyze`
price the same layout differently.
"""

import ast
import inspect
import json

import pytest

from c3kit.cli.main import main
from c3kit.studies import validation
from c3kit.studies.validation import default_cost_model, load_runs, predict, validate


def test_validation_module_defines_no_numeric_tuning_constant():
    tree = ast.parse(inspect.getsource(validation))
    allowed = {"TARGETS"}  # the targets, printed beside the figures, never used to price
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if names & allowed:
                continue
            nums = [n for n in ast.walk(node.value) if isinstance(n, ast.Constant)
                    and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)]
            assert not nums, f"module-level numeric constant in validation.py: {names}"
    src = inspect.getsource(validation)
    for word in ("curve_of", "peak_frac", "with_(curve", "fit_"):
        assert word not in src, word


def test_targets_are_not_used_to_price():
    src = inspect.getsource(validation.predict) + inspect.getsource(validation.validate)
    assert "TARGETS" not in src


def test_predictions_do_not_depend_on_measured_figures():
    runs = load_runs().head(30)
    a = validate(runs=runs).table["predicted_s"]
    doubled = runs.copy()
    doubled["measured_value"] = doubled["measured_value"] * 2
    doubled["measured_s"] = doubled["measured_s"] * 2
    b = validate(runs=doubled).table["predicted_s"]
    assert (a.fillna(-1) == b.fillna(-1)).all()


def test_default_cost_model_is_analyzes_default():
    from c3kit.cli.common import with_power

    cm, _ = with_power("efficiency", "sustained")  # `c3kit analyze` defaults
    assert default_cost_model() == cm


ROW_MODEL = "<the row's model>"  # stands for a model TOML file written from the row (validation.model_of)


def write_model_toml(row, path) -> str:
    """The row's ModelConfig as a model TOML file for `c3kit analyze --model` (path returned as a string)."""
    from c3kit.studies.validation import model_of

    d = {k: v for k, v in model_of(row).to_dict().items() if k not in ("sources", "params", "active_params")}
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in d.items()))
    return str(path)


@pytest.mark.parametrize("run, args", [
    ("torchtitan-a100-l3-70b-full",
     ["--model", "llama-3-70b", "--hw", "A100-SXM-80G", "--gpus", "64", "--tp", "1", "--pp", "1", "--dp", "64",
      "--fsdp", "--seq", "8192", "--batch", "64", "--micro-batch", "1", "--recompute", "full",
      "--norm-rope", "eager", "--glue", "separate"]),
    ("mbridge2511-h100-llama3-70b",
     ["--model", "llama-3-70b", "--hw", "H100-SXM", "--gpus", "64", "--tp", "4", "--sp", "--pp", "8", "--vpp", "5",
      "--dp", "2", "--dist-opt", "--seq", "8192", "--batch", "128", "--micro-batch", "1", "--recompute", "none",
      "--dtype", "fp8", "--fp8-scaling", "current", "--glue", "fused", "--grad-acc", "none", "--pp-p2p-overlap"]),
    ("torchtitan-h100-t5-405b-3d-1f1b",  # FSDP once per step under PP (validation.fsdp_sync_of)
     ["--model", "llama-3-405b", "--hw", "H100-SXM-96G-500W", "--gpus", "512", "--tp", "8", "--sp", "--pp", "8",
      "--dp", "8", "--fsdp", "--fsdp-sync", "step", "--pp-split", "torchtitan", "--seq", "8192", "--batch", "256",
      "--micro-batch", "4", "--recompute", "full", "--dtype", "fp8", "--fp8-scaling", "dynamic",
      "--attention-backend", "flash2", "--norm-rope", "fused", "--glue", "fused", "--grad-acc", "micro"]),
    ("torchtitan-h100-t2-8b-s128k-cp4",  # torch context parallelism (validation.cp_impl_of)
     ["--model", "llama-3-8b", "--hw", "H100-SXM-96G-500W", "--gpus", "8", "--tp", "1", "--pp", "1", "--cp", "4",
      "--dp", "2", "--fsdp", "--seq", "131072", "--batch", "2", "--micro-batch", "1", "--recompute", "full",
      "--dtype", "fp8", "--fp8-scaling", "dynamic", "--attention-backend", "flash2", "--norm-rope", "fused",
      "--glue", "fused", "--cp-impl", "torch"]),
    ("torchtitan-h100-t1-8b-fsdp",  # torchtitan's op-level selective AC (studies/data/recompute_modes.csv)
     ["--model", "llama-3-8b", "--hw", "H100-SXM-96G-500W", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8",
      "--fsdp", "--seq", "8192", "--batch", "16", "--micro-batch", "2", "--recompute", "op",
      "--attention-backend", "flash2", "--norm-rope", "eager", "--glue", "separate"]),
    # llm-foundry on A100, FSDP1 with bf16 gradient reduction (studies/data/fsdp_precision.csv), Composer's metrics,
    # flash-attn's xentropy loss, MPT's biases; the model is the row's (a model TOML file: no MPT preset)
    ("mpt-70b-a100-bf16-s2048-g64",
     ["--model", ROW_MODEL, "--hw", "A100-SXM-80G", "--gpus", "64", "--tp", "1", "--pp", "1", "--dp", "64", "--fsdp",
      "--fsdp-impl", "flat", "--seq", "2048", "--batch", "2048", "--micro-batch", "8", "--recompute", "full",
      "--attention-backend", "flash2", "--train-metrics", "2", "--flat-param-grads", "--optimizer-impl", "unfused",
      "--loss-kernel", "xentropy", "--bias-grads", "--grad-reduce-dtype", "bf16"]),
    ("mpt-7b-a100-bf16-s2048-g8",  # v0.3.0: fp32 gradient reduction
     ["--model", ROW_MODEL, "--hw", "A100-SXM-80G", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--fsdp",
      "--fsdp-impl", "flat", "--seq", "2048", "--batch", "96", "--micro-batch", "6", "--recompute", "none",
      "--attention-backend", "flash2", "--train-metrics", "2", "--flat-param-grads", "--optimizer-impl", "unfused",
      "--loss-kernel", "xentropy", "--bias-grads", "--grad-reduce-dtype", "fp32"]),
    # llm-foundry FP8 on H100: TE DelayedScaling with weights re-cast every micro-batch, metrics on bf16 logits, the
    # bias gradients fused into TE's cast
    ("mpt-1b-h100-fp8-s8192-g8",
     ["--model", ROW_MODEL, "--hw", "H100-SXM", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--fsdp",
      "--fsdp-impl", "flat", "--seq", "8192", "--batch", "64", "--micro-batch", "2", "--recompute", "none",
      "--dtype", "fp8", "--fp8-scaling", "delayed_uncached", "--attention-backend", "flash2", "--train-metrics", "2",
      "--flat-param-grads", "--optimizer-impl", "unfused", "--loss-kernel", "xentropy", "--no-bias-grads",
      "--train-metrics-dtype", "bf16"]),
    # Megatron-Bridge MoE on B200: EP 8 with ZeRO-1, MXFP8, TE GroupedLinear's per-expert GEMMs
    ("mbridge2602-b200-qwen3-30b-a3b",
     ["--model", ROW_MODEL, "--hw", "B200", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--ep", "8",
      "--dist-opt", "--seq", "4096", "--batch", "512", "--micro-batch", "1", "--recompute", "none", "--dtype", "fp8",
      "--fp8-scaling", "mxfp8", "--attention-backend", "cudnn", "--glue", "fused", "--grad-acc", "none",
      "--moe-experts", "per_expert", "--no-moe-a2a-overlap"]),
])
def test_validate_equals_analyze_for_the_same_layout(run, args, tmp_path, capsys):
    row = load_runs().set_index("run").loc[run].copy()
    row["run"] = run
    mine = predict(row)["predicted_s"]
    args = [write_model_toml(row, tmp_path / "model.toml") if a == ROW_MODEL else a for a in args]
    assert main(["analyze", *args, "--out", str(tmp_path / "a"), "--json"]) == 0
    theirs = json.loads(capsys.readouterr().out)["totals"]["step_time"]
    assert mine == pytest.approx(theirs, rel=1e-12)
