"""ring-dma = PyTorch async TP: the exact task lists of both decompositions on a hand-checked 4-GPU case.

The expected lists are written out from torch/distributed/_symmetric_memory/__init__.py
(_pipelined_multi_all_gather_and_consume, _pipelined_produce_and_all2all) for group_size 4; see
docs/async_tp.md for the walk through the source."""

import pytest

from c3kit.hw import get_gpu
from c3kit.overlap import OverlapProblem
from c3kit.overlap.costs import CostCache
from c3kit.overlap.schedules import SCHEDULES, Ctx, build
from c3kit.sim import ContentionParams

H100 = get_gpu("H100-SXM")
P = ContentionParams()  # defaults: sm_launch 2 us, sm_sync 1 us, copy_hbm_factor 2; dma latencies from the catalog
CUR, BACK = "compute", "comm"  # the current stream and PyTorch's backend stream


def _tasks(pattern, m=512, n=256, k=128):
    ctx = Ctx(OverlapProblem(pattern, m, n, k, "bf16", 4), H100, P, CostCache(H100, P.tile_m, P.tile_n, 1.0))
    tasks, _ = build(SCHEDULES["ring-dma"], ctx, "sm")
    return ctx, tasks


def _check_barrier(t, stream, deps=()):
    # one kernel start plus one flag exchange over the fabric (0.6 us on H100's NVSwitch), then the poll
    assert (t.kind, t.stream, t.deps, t.work) == ("comm", stream, deps, 0.0)
    assert t.pre == pytest.approx(2e-6 + 0.6e-6) and t.post == pytest.approx(1e-6)


def _check_pull(t, stream, nbytes, deps):
    # one cudaMemcpyAsync from one peer's symmetric buffer: one copy engine at the catalog's per-copy rate
    assert (t.kind, t.stream, t.deps, t.work, t.engines, t.sms) == ("comm", stream, deps, nbytes, 1, 0.0)
    assert t.bw == 375e9 and t.hbm == 2.0
    assert t.pre == pytest.approx(3e-6 + 0.6e-6) and t.post == pytest.approx(4e-6)


def _check_gemm(ctx, t, stream, rows, deps=()):
    assert (t.kind, t.stream, t.deps) == ("compute", stream, deps)
    assert t.work == ctx.cache.gemm(rows, 256, 128, "bf16").time


def test_all_gather_matmul_task_list_on_4_gpus():
    # 512 gathered rows on 4 GPUs: 128 rows per rank, shard = 128 x 128 x 2 B = 32768 B
    ctx, tasks = _tasks("ag_gemm")
    assert [t.name for t in tasks] == ["host-issue", "barrier-0", "mv", "barrier-1", "gemm-local", "ag-1", "gemm-1",
                                       "ag-2", "gemm-2", "ag-3", "gemm-3", "ag-out", "barrier-end"]
    t = {x.name: x for x in tasks}
    _check_barrier(t["barrier-0"], CUR)
    _check_barrier(t["barrier-1"], CUR)
    for name in ("mv", "ag-out"):  # local shard copies: read + write 32768 B each, priced as a memory-bound op
        assert (t[name].kind, t[name].stream, t[name].deps) == ("compute", CUR, ())
        assert t[name].work == ctx.cache.mem(2 * 32768) and t[name].hbm * t[name].work == pytest.approx(65536)
    _check_gemm(ctx, t["gemm-local"], CUR, 128)
    # step 1 on the backend stream (it waited for the current one after barrier 1), step 2 on the current,
    # step 3 on the backend again; every pull waits for the one issued before it
    _check_pull(t["ag-1"], BACK, 32768, ("barrier-1",))
    _check_pull(t["ag-2"], CUR, 32768, ("ag-1",))
    _check_pull(t["ag-3"], BACK, 32768, ("ag-2",))
    for j, st in ((1, BACK), (2, CUR), (3, BACK)):
        _check_gemm(ctx, t[f"gemm-{j}"], st, 128)
    # group_size 4 is even: the copy into the all-gather output goes on the current stream; the last barrier
    # waits for both streams and, issued last, for the host
    _check_barrier(t["barrier-end"], CUR, ("ag-out", "gemm-3", "host-issue"))


def test_matmul_reduce_scatter_task_list_on_4_gpus():
    # 512 rows scattered over 4 GPUs: chunk = 128 x 256 x 2 B = 65536 B; the sum reads the 4 stacked partials
    # (512 x 256 x 2 B) and writes one chunk
    ctx, tasks = _tasks("gemm_rs")
    assert [t.name for t in tasks] == [
        "host-issue", "barrier-0",
        "gemm-1", "barrier-1a", "rs-1", "barrier-1b",
        "gemm-2", "barrier-2a", "rs-2", "barrier-2b",
        "gemm-3", "barrier-3a", "rs-3", "barrier-3b",
        "gemm-local", "barrier-end", "rs-sum"]
    t = {x.name: x for x in tasks}
    _check_barrier(t["barrier-0"], CUR)
    for j, st in ((1, BACK), (2, CUR), (3, BACK)):
        _check_gemm(ctx, t[f"gemm-{j}"], st, 128, ("barrier-0",) if j == 1 else ())
        _check_barrier(t[f"barrier-{j}a"], st)
        _check_pull(t[f"rs-{j}"], st, 65536, (f"rs-{j - 1}",) if j > 1 else ())
        _check_barrier(t[f"barrier-{j}b"], st)
    _check_gemm(ctx, t["gemm-local"], CUR, 128)
    _check_barrier(t["barrier-end"], CUR, ("gemm-local", "barrier-3b"))
    red = t["rs-sum"]
    assert (red.kind, red.stream, red.deps) == ("compute", CUR, ("barrier-end", "host-issue"))
    assert red.work == ctx.cache.mem(512 * 256 * 2 + 65536)
    assert red.hbm * red.work == pytest.approx(512 * 256 * 2 + 65536)


@pytest.mark.parametrize("name", ["H100-SXM", "H200-SXM"])
def test_copy_engine_rate_is_the_published_per_copy_measurement(name):
    # p2pBandwidthLatencyTest on 8 x H100 SXM (NVIDIA/nccl#1264): 371-377 GB/s per peer copy; H200: same fabric
    g = get_gpu(name)
    assert g.dma.bw_per_engine == 375e9 and g.dma.engines == 3


@pytest.mark.parametrize("gpus", [2, 3, 5, 8])
def test_streams_alternate_and_the_output_copy_follows_the_group_size_parity(gpus):
    # step j runs on the backend stream when j is odd; the all-gather output copy goes on the current stream
    # when the group size is even, on the backend stream when it is odd (as PyTorch issues it)
    ctx = Ctx(OverlapProblem("ag_gemm", 64 * gpus, 256, 128, "bf16", gpus), H100, P,
              CostCache(H100, P.tile_m, P.tile_n, 1.0))
    t = {x.name: x for x in build(SCHEDULES["ring-dma"], ctx, "sm")[0]}
    for j in range(1, gpus):
        want = BACK if j % 2 else CUR
        assert t[f"ag-{j}"].stream == t[f"gemm-{j}"].stream == want
    assert t["ag-out"].stream == (CUR if gpus % 2 == 0 else BACK)
    # the last barrier waits for the last task of each stream: the output copy and the last step's GEMM
    assert set(t["barrier-end"].deps) == {"ag-out", f"gemm-{gpus - 1}", "host-issue"}


# --- the host that issues the loop ------------------------------------------------------------------------------
# Host-issued operations of one call, counted by hand from the two loops for group size 8 (7 remote steps):
#   all-gather matmul: barrier(0), wait_stream (record + wait), mv copy_, barrier(1), wait_stream (2), local mm.out;
#     per step copy_ + mm.out (2 x 7 = 14); ag-out copy_, wait_stream (2), barrier(0)      -> 1+2+1+1+2+1+14+1+2+1 = 26
#   matmul reduce-scatter: barrier(0), wait_stream (2); per step mm.out, barrier, copy_, barrier (4 x 7 = 28);
#     _sleep(100) at step 2; local mm.out, wait_stream (2), barrier(0), the sum              -> 1+2+28+1+1+2+1+1 = 37
HOST_OPS_8 = {"ag_gemm": 26, "gemm_rs": 37}
PER_STEP = {"ag_gemm": 2, "gemm_rs": 4}


def _host_task(pattern, gpus, params):
    ctx = Ctx(OverlapProblem(pattern, 64 * gpus, 256, 128, "bf16", gpus), H100, params,
              CostCache(H100, params.tile_m, params.tile_n, 1.0))
    tasks, _ = build(SCHEDULES["ring-dma"], ctx, "sm")
    return ctx, tasks, next(t for t in tasks if t.name == "host-issue")


@pytest.mark.parametrize("pattern", ["ag_gemm", "gemm_rs"])
def test_host_issued_operations_per_call_and_per_step_on_8_gpus(pattern):
    e = 1e-6
    _, tasks, host = _host_task(pattern, 8, P.with_(eager_launch=e))
    assert host.pre == pytest.approx(HOST_OPS_8[pattern] * e)
    assert (host.stream, host.work, host.post, host.deps, host.engines, host.sms) == ("host", 0.0, 0.0, (), 0, 0.0)
    # one more GPU adds one step: PER_STEP more operations
    _, _, host7 = _host_task(pattern, 7, P.with_(eager_launch=e))
    assert host.pre - host7.pre == pytest.approx(PER_STEP[pattern] * e)
    # the last-issued task waits for the host
    assert tasks[-1].deps[-1] == "host-issue"


@pytest.mark.parametrize("pattern", ["ag_gemm", "gemm_rs"])
def test_host_issue_time_is_the_measured_eager_launch_by_default_and_nothing_in_a_cuda_graph(pattern):
    from c3kit.cost.launch import eager_launch_s

    _, _, host = _host_task(pattern, 8, P)  # eager_launch None: the GPU's measured eager launch
    assert host.pre == pytest.approx(HOST_OPS_8[pattern] * eager_launch_s(H100))
    assert 5e-6 < eager_launch_s(H100) < 10e-6  # the H200 host's 7.11 us per eager kernel (ops-floor calibration)
    _, _, graphed = _host_task(pattern, 8, P.with_(eager_launch=0.0))
    assert graphed.pre == 0.0


def test_the_host_bound_applies_only_in_eager_mode():
    from c3kit.overlap.evaluate import evaluate

    # a tiny all-gather matmul whose GPU work is a few microseconds: in eager mode the host sets the time
    prob = OverlapProblem("ag_gemm", 512, 256, 128, "bf16", 8)
    graph = ContentionParams.ideal()  # no latencies, eager_launch 0: the loop in a CUDA graph
    eager = graph.with_(eager_launch=1e-3)
    (g,) = evaluate(prob, H100, ["ring-dma"], graph)
    (e,) = evaluate(prob, H100, ["ring-dma"], eager)
    assert g.time < 1e-3
    # exact: the last barrier is issued after 26 operations of 1 ms, then takes its fabric latency (ideal: no
    # kernel launch or sync)
    assert e.time == pytest.approx(26e-3 + H100.scaleup.latency)
    # where the GPU is the bound, eager at the measured launch (26 x 7.1 us) and graph agree
    big = OverlapProblem("ag_gemm", 8192, 8192, 8192, "bf16", 8)
    (gb,) = evaluate(big, H100, ["ring-dma"], graph)
    (eb,) = evaluate(big, H100, ["ring-dma"], graph.with_(eager_launch=None))
    assert gb.time > 1e-3 and eb.time == gb.time


def test_reduce_scatter_host_bound_exact_on_a_small_case():
    from c3kit.overlap.evaluate import evaluate
    from c3kit.sim.engine import alone_time

    prob = OverlapProblem("gemm_rs", 512, 256, 128, "bf16", 8)
    params = ContentionParams.ideal().with_(eager_launch=1e-3)
    ctx = Ctx(prob, H100, params, CostCache(H100, params.tile_m, params.tile_n, params.gemm_hbm_traffic))
    tasks, _ = build(SCHEDULES["ring-dma"], ctx, "sm")
    (r,) = evaluate(prob, H100, ["ring-dma"], params)
    # the sum is issued after 37 operations of 1 ms and then runs alone (every other task is done by then)
    assert r.time == pytest.approx(37e-3 + alone_time(tasks[-1], ctx.res))
