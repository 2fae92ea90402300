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
      "--dtype", "fp8", "--fp8-scaling", "current", "--glue", "fused", "--grad-acc", "none", "--pp-p2p-overlap",
      "--tp-comm-overlap", "ring_exchange"]),  # TE userbuffers (studies/data/tp_overlap.csv)
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
    ("torchtitan-h100-t2-8b-s256k-cp8",  # FSDP over the cp ranks alone (dp 1): the layout keeps it
     ["--model", "llama-3-8b", "--hw", "H100-SXM-96G-500W", "--gpus", "8", "--tp", "1", "--pp", "1", "--cp", "8",
      "--dp", "1", "--fsdp", "--seq", "262144", "--batch", "1", "--micro-batch", "1", "--recompute", "full",
      "--dtype", "fp8", "--fp8-scaling", "dynamic", "--attention-backend", "flash2", "--norm-rope", "fused",
      "--glue", "fused", "--cp-impl", "torch"]),
    # llm-foundry on A100, FSDP1 with bf16 gradient reduction (studies/data/fsdp_precision.csv), Composer's metrics,
    # flash-attn's xentropy loss, MPT's biases; the model is the row's (a model TOML file: no MPT preset)
    ("mpt-70b-a100-bf16-s2048-g64",
     ["--model", ROW_MODEL, "--hw", "A100-SXM-80G", "--gpus", "64", "--tp", "1", "--pp", "1", "--dp", "64", "--fsdp",
      "--fsdp-impl", "flat", "--seq", "2048", "--batch", "2048", "--micro-batch", "8", "--recompute", "full",
      "--attention-backend", "flash1", "--train-metrics", "2", "--flat-param-grads", "--optimizer-impl", "unfused",
      "--loss-kernel", "xentropy", "--bias-grads", "--grad-reduce-dtype", "bf16"]),
    ("mpt-7b-a100-bf16-s2048-g8",  # v0.3.0: fp32 gradient reduction
     ["--model", ROW_MODEL, "--hw", "A100-SXM-80G", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--fsdp",
      "--fsdp-impl", "flat", "--seq", "2048", "--batch", "96", "--micro-batch", "6", "--recompute", "none",
      "--attention-backend", "flash1", "--train-metrics", "2", "--flat-param-grads", "--optimizer-impl", "unfused",
      "--loss-kernel", "xentropy", "--bias-grads", "--grad-reduce-dtype", "fp32"]),
    # llm-foundry FP8 on H100: TE DelayedScaling with weights re-cast every micro-batch, metrics on bf16 logits, the
    # bias gradients fused into TE's cast
    ("mpt-1b-h100-fp8-s8192-g8",
     ["--model", ROW_MODEL, "--hw", "H100-SXM", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--fsdp",
      "--fsdp-impl", "flat", "--seq", "8192", "--batch", "64", "--micro-batch", "2", "--recompute", "none",
      "--dtype", "fp8", "--fp8-scaling", "delayed_uncached", "--attention-backend", "flash1", "--train-metrics", "2",
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


# each fact validation prices a run with (validation.predict's and layout_of's keyword arguments, build_step's and
# Structure.of's keyword parameters) -> the `c3kit analyze` option that sets it; a name not listed is --name-with-dashes
ANALYZE_OPTION = {"grad_dtype": "--grad-reduce-dtype", "attn_backend": "--attention-backend",
                  "metrics_fp32": "--train-metrics-dtype", "dist_optimizer": "--dist-opt", "global_batch": "--batch",
                  "gpus_per_node": "--hw", "model": "--model", "gpu": "--hw"}


def _option(fact: str) -> str:
    return ANALYZE_OPTION.get(fact, "--" + fact.replace("_", "-"))


def _keywords(fn, callee: str) -> set[str]:
    """Keyword names that fn's source passes to calls of `callee` (a function name or a method attribute)."""
    import textwrap

    names = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn)))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name == callee:
                names |= {k.arg for k in node.keywords if k.arg}
    return names


def _subscript_keys(fn, var: str) -> set[str]:
    """String keys assigned into the dict `var` in fn's source (kw["cp"] = ...)."""
    import textwrap

    keys = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn)))):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == var
                        and isinstance(t.slice, ast.Constant)):
                    keys.add(t.slice.value)
    return keys


def validation_facts() -> set[str]:
    """Every per-run fact validation prices with: predict's build_step and overhead keywords, layout_of's
    Parallelism keywords, and build_step's / Structure.of's own keyword parameters."""
    from c3kit.workload.graph import build_step
    from c3kit.workload.layer import Structure

    facts = _keywords(validation.predict, "build_step") | _keywords(validation.predict, "replace")
    facts |= _keywords(validation.layout_of, "dict") | _subscript_keys(validation.layout_of, "kw")
    positional = {"model", "par", "phase"}  # the model, the layout (above) and the phase: --model, layout, --phase
    for fn in (build_step, Structure.of):
        facts |= {k for k in inspect.signature(fn).parameters if k not in positional}
    return facts | {"model", "gpu", "phase"}


def analyze_options() -> set[str]:
    """Every option name `c3kit analyze` accepts (both halves of a --x/--no-x flag)."""
    import typer.main

    from c3kit.cli.main import app

    cmd = typer.main.get_command(app).commands["analyze"]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def test_validation_facts_are_found():
    facts = validation_facts()
    # the ones this file's rows set by hand, so the derivation cannot silently come back empty
    assert {"grad_dtype", "loss_kernel", "bias_grads", "metrics_fp32", "train_metrics", "flat_param_grads",
            "fsdp_impl", "optimizer_impl", "fp8_scaling", "moe_experts", "attn_backend", "norm_rope", "glue",
            "grad_acc", "tp", "sp", "dp", "pp", "vpp", "ep", "cp", "fsdp", "micro_batch", "global_batch", "recompute",
            "dist_optimizer", "pp_split", "fsdp_sync", "moe_a2a_overlap", "dp_overlap", "pp_p2p_overlap", "cp_impl",
            "zero2", "seq", "dtype"} <= facts


def test_every_fact_validate_prices_has_an_analyze_option():
    opts = analyze_options()
    missing = sorted(f"{f} ({_option(f)})" for f in validation_facts() if _option(f) not in opts)
    assert not missing, f"validate prices runs with facts `c3kit analyze` cannot set: {', '.join(missing)}"


def test_analyze_passes_every_option_to_the_api():
    from c3kit import api
    from c3kit.cli import analyze_cmd

    cli = set(inspect.signature(analyze_cmd.analyze).parameters) - {"out", "as_json"}
    call = _keywords(analyze_cmd.analyze, "analyze")
    assert cli - {"model", "hw"} <= call  # model and hw go by position
    assert call <= set(inspect.signature(api.analyze).parameters)


def analyze_kwargs(row, m, p) -> dict:
    """c3kit.analyze's keyword arguments for a run, from the layout and validation's per-run facts (the *_of
    functions and studies/data tables predict reads)."""
    v, run, fw, dtype = validation, str(row["run"]), row["framework"], str(row["dtype"])
    code = v.norm_rope_of(run)
    return dict(gpus=p.gpus, tp=p.tp, sp=p.sp, dp=p.dp, fsdp=p.fsdp, dist_opt=p.dist_optimizer, zero2=p.zero2,
                pp=p.pp, vpp=p.vpp, ep=p.ep, cp=p.cp, pp_split=p.pp_split, seq=int(row["seq"]), batch=p.global_batch,
                micro_batch=p.micro_batch, dtype=dtype, recompute=p.recompute, recompute_every=p.recompute_every,
                fsdp_sync=p.fsdp_sync, moe_a2a_overlap=p.moe_a2a_overlap, dp_overlap=p.dp_overlap,
                pp_p2p_overlap=p.pp_p2p_overlap, cp_impl=p.cp_impl, tp_comm_overlap=p.tp_comm_overlap,
                pp_engine=p.pp_engine,
                attention_backend=v.attention_backend_of(run) or None, norm_rope=code, glue=v.glue_of(fw, code),
                grad_acc=v.grad_acc_of(fw, row["source"], p.fsdp_sync), train_metrics=v.train_metrics_of(fw),
                flat_param_grads=v.flat_param_grads_of(fw, p.fsdp), loss_kernel=v.loss_kernel_of(fw),
                bias_grads=v.bias_grads_of(fw, dtype) and m.bias,
                train_metrics_dtype="fp32" if v.metrics_fp32_of(fw, dtype) or not v.train_metrics_of(fw) else "bf16",
                grad_reduce_dtype=v.grad_reduce_dtype_of(run, p.fsdp),
                fsdp_impl=v.fsdp_impl_of(fw) if p.fsdp else "fsdp2", optimizer_impl=v.optimizer_impl_of(fw),
                fp8_scaling=(v.fp8_scaling_of(run) or "delayed") if dtype == "fp8" else "delayed",
                moe_experts=v.moe_experts_of(run) if m.is_moe else "grouped", compare_overlap=False)


def test_every_row_prices_the_same_through_the_api(tmp_path):
    """Every scored run, asked of c3kit.analyze with its facts, prices as validate prices it; the only refusals
    allowed are layouts c3kit's memory model says do not fit (analyze refuses those, validate prices them)."""
    from c3kit import api
    from c3kit.errors import C3kitError, MemoryFitError

    runs, equal, refused = load_runs(), 0, []
    for _, row in runs.iterrows():
        try:
            m, p = validation.run_objects(row)
            mine = predict(row)["predicted_s"]
        except C3kitError:  # not modelled: validate does not score it either
            continue
        try:
            theirs = api.analyze(write_model_toml(row, tmp_path / "m.toml"), str(row["gpu"]),
                                 **analyze_kwargs(row, m, p)).step_time
        except MemoryFitError:
            refused.append(row["run"])
            continue
        assert theirs == pytest.approx(mine, rel=1e-12), row["run"]
        equal += 1
    assert equal >= 0.9 * len(runs), refused
