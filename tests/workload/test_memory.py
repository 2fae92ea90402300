"""Per-GPU memory: Korthikanti et al. activation formulas, weights/optimizer sharding, fits verdict."""

import pytest

from c3kit.errors import MemoryFitError, WorkloadError
from c3kit.workload.graph import build_step
from c3kit.workload.memory import (in_flight_micro_batches, layer_activation_bytes, memory_report, check_fits)
from c3kit.workload.model import get_model
from c3kit.workload.parallel import Parallelism

G175 = get_model("GPT-175B")  # MHA, 4H GeLU MLP, dropout: the paper's setting
S, H, A = 2048, 12288, 96
SBH = S * H


def act(t, sp=False, rc="none", flash=False):
    return layer_activation_bytes(G175, Parallelism(tp=t, sp=sp, recompute=rc), S, flash_attention=flash)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_table2(t):
    assert act(t) == pytest.approx(SBH * (10 + 24 / t + 5 * A * S / (H * t)))
    if t > 1:
        assert act(t, sp=True) == pytest.approx(SBH / t * (34 + 5 * A * S / H))
    assert act(t, rc="selective") == pytest.approx(SBH * (10 + 24 / t))
    if t > 1:
        assert act(t, sp=True, rc="selective") == pytest.approx(SBH * 34 / t)
    assert act(t, rc="full") == 2 * SBH
    assert act(1) == pytest.approx(SBH * (34 + 5 * A * S / H))


def test_flash_attention_drops_the_s2_term():
    assert act(8, flash=True) == pytest.approx(SBH * (10 + 24 / 8) + 4 * (A // 8) * S)


def test_in_flight_micro_batches():
    assert in_flight_micro_batches(Parallelism(pp=1, global_batch=8)) == 1
    assert in_flight_micro_batches(Parallelism(pp=8, global_batch=64)) == 8
    assert in_flight_micro_batches(Parallelism(pp=8, global_batch=4)) == 4
    assert in_flight_micro_batches(Parallelism(pp=4, vpp=2, global_batch=16)) == pytest.approx(4 * (1 + 3 / 8))


def test_175b_paper_configuration_fits_a100_only_with_sp_selective():
    # Korthikanti et al. Table 3: 175B at TP 8, PP 8 on 80 GB A100s, micro-batch 1
    base = dict(tp=8, pp=8, global_batch=64)
    none = memory_report(G175, 80e9, par=Parallelism(**base), flash_attention=False)
    ok = memory_report(G175, 80e9, par=Parallelism(sp=True, recompute="selective", **base), flash_attention=False)
    assert not none.fits and ok.fits
    # 18 bytes per parameter of the first stage: bf16 weight, fp32 grad, Adam (fp32 master, 2 moments)
    params = ok.weights / 2
    assert ok.gradients == 4 * params and ok.optimizer == 12 * params
    # activations = 96 layers' worth (12 per stage x 8 in flight) + embedding dropout mask
    assert ok.activations == pytest.approx(96 * SBH * 34 / 8 + 8 * SBH / 8)


def test_llama70b_weights_and_breakdown():
    r = memory_report(build_step(get_model("Llama-3-70B"), Parallelism(tp=8), seq=8192), 141e9)
    per_rank = 80 * 106_971_136 + 2 * 16032 * 8192
    assert r.weights == 2 * per_rank and r.gradients == 4 * per_rank and r.optimizer == 12 * per_rank
    assert not r.fits and r.headroom < 0
    assert r.summary().startswith("needs 219 GB per GPU (weights 17.6 GB, gradients 35.3 GB, optimizer 106 GB")


def test_sharding_and_inference():
    m = get_model("Llama-3-70B")
    plain = memory_report(m, 141e9, par=Parallelism(tp=8, dp=4), seq=4096)
    zero1 = memory_report(m, 141e9, par=Parallelism(tp=8, dp=4, dist_optimizer=True), seq=4096)
    fsdp = memory_report(m, 141e9, par=Parallelism(tp=8, dp=4, fsdp=True), seq=4096)
    assert zero1.optimizer == pytest.approx(plain.optimizer / 4) and zero1.weights == plain.weights
    assert fsdp.weights == pytest.approx(plain.weights / 4) and fsdp.gradients == pytest.approx(plain.gradients / 4)
    dec = memory_report(m, 141e9, par=Parallelism(tp=8, micro_batch=16), phase="decode", seq=8192)
    assert dec.gradients == dec.optimizer == 0
    assert dec.kv_cache == 2 * 80 * 16 * 8192 * 1 * 128 * 2  # K and V, one KV head per rank
    assert dec.fits


def test_check_fits_message():
    with pytest.raises(MemoryFitError, match=r"^needs [0-9.]+ [GT]B per GPU \(weights .*\), H200-SXM has 141 GB: "
                                             r"raise tp/pp, use fsdp or recompute$"):
        from c3kit.hw.catalog import get_gpu

        check_fits(get_model("Llama-3-405B"), get_gpu("H200-SXM"), par=Parallelism(tp=8), seq=8192)
    assert check_fits(get_model("Llama-3-8B"), 141e9, par=Parallelism(tp=8), seq=4096).fits


def test_bad_arguments():
    with pytest.raises(WorkloadError, match="par="):
        memory_report(get_model("Llama-3-8B"), 80e9)
    with pytest.raises(WorkloadError, match="capacity"):
        memory_report(get_model("Llama-3-8B"), 0, par=Parallelism())
    with pytest.raises(WorkloadError, match="heads are not divisible"):
        memory_report(get_model("Llama-3-8B"), 80e9, par=Parallelism(tp=3))


def test_inference_misfit_hint():
    with pytest.raises(MemoryFitError, match="kv cache .*: raise tp/pp or lower the batch or sequence length$"):
        check_fits(get_model("Llama-3-70B"), 141e9, par=Parallelism(tp=8, micro_batch=256), phase="decode", seq=32768)
