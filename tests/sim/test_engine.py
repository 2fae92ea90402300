"""Hand-checked timelines of the simulator: exact values for each rule of the contention model."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit.errors import SimError
from c3kit.sim import ContentionParams, Resources, Stream, Task, alone_time, simulate

RES = Resources(sms=100, hbm_bw=1e12, dma_engines=2, link_bw=1e11, links=1)
QUIET = ContentionParams(gemm_interference=0.0, comm_interference=0.0, noprio_comm_sm_share=0.5)
US = 1e-6


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-15)


def comp(name, work, stream="compute", **kw):
    return Task(name, stream, work, **kw)


def comm(name, nbytes, stream="comm", **kw):
    return Task(name, stream, nbytes, kind="comm", **kw)


def test_one_task_and_stream_order():
    tl = simulate([comp("a", 10 * US), comp("b", 5 * US)], RES, params=QUIET)
    assert tl.get("a").end == approx(10 * US)
    assert tl.get("b").start == approx(10 * US)
    assert tl.makespan == approx(15 * US)


def test_dependency_across_streams():
    tasks = [comm("c", 1e6, bw=1e11), comp("g", 4 * US, deps=("c",))]
    tl = simulate(tasks, RES, params=QUIET)
    assert tl.get("g").start == approx(10 * US)
    assert tl.makespan == approx(14 * US)


def test_priority_comm_takes_its_sms():
    # comm holds 10 of 100 SMs for its 10 us; the GEMM runs at 0.9 meanwhile, then finishes its last 1 us
    tasks = [comp("g", 10 * US), comm("c", 1e6, sms=10, bw=1e11)]
    tl = simulate(tasks, RES, [Stream("comm", 1)], params=QUIET)
    assert tl.get("c").end == approx(10 * US)
    assert tl.get("g").end == approx(11 * US)


def test_same_priority_comm_gets_share_of_its_sms():
    # comm gets 0.5 x 10 = 5 SMs -> half its bandwidth; the GEMM keeps 95 SMs -> rate 0.95
    tasks = [comp("g", 10 * US), comm("c", 1e6, sms=10, bw=1e11)]
    tl = simulate(tasks, RES, params=QUIET)
    t1 = 10 * US / 0.95
    assert tl.get("g").end == approx(t1)
    assert tl.get("c").end == approx(t1 + (1e6 - 5e10 * t1) / 1e11)


def test_idle_sms_go_to_comm_without_priority():
    # the GEMM has 40 tiles so it can use only 40 SMs; the comm kernel gets all 10 SMs it asks for
    tasks = [comp("g", 10 * US, tiles=40), comm("c", 1e6, sms=10, bw=1e11)]
    tl = simulate(tasks, RES, params=QUIET)
    assert tl.get("c").end == approx(10 * US)
    assert tl.get("g").end == approx(10 * US)


def test_wave_quantization_and_partition():
    # 200 tiles: 2 waves on 100 SMs, 3 waves on 90 -> 1.5x slower
    t = comp("g", 10 * US, tiles=200, sms=90)
    assert alone_time(t, RES) == approx(15 * US)
    assert simulate([t], RES, params=QUIET).makespan == approx(15 * US)


def test_memory_bound_gemm_tolerates_fewer_sms():
    # phi = 0.2: half the SMs doubles only the SM-bound fifth of the time, which still hides under memory
    t = comp("g", 10 * US, sms=50, phi=0.2)
    assert alone_time(t, RES) == approx(10 * US)


def test_dma_engines_are_exclusive():
    res = Resources(sms=100, hbm_bw=1e12, dma_engines=1, link_bw=1e11)
    tasks = [comm("a", 1e6, engines=1, bw=1e11), comm("b", 1e6, stream="comm2", engines=1, bw=1e11)]
    tl = simulate(tasks, res, params=QUIET)
    assert tl.get("b").start == approx(10 * US)
    assert tl.makespan == approx(20 * US)


def test_links_are_shared():
    tasks = [comm("a", 1e6, bw=1e11), comm("b", 1e6, stream="comm2", bw=1e11)]
    tl = simulate(tasks, RES, params=QUIET)
    assert tl.get("a").end == approx(20 * US)
    assert tl.get("b").end == approx(20 * US)


MESH = Resources(sms=100, hbm_bw=1e12, dma_engines=2, link_bw=1e11, links=4)


def test_a_transfer_gets_the_links_it_uses():
    assert simulate([comm("a", 1e6, links=0b0001)], MESH, params=QUIET).makespan == approx(40 * US)
    assert simulate([comm("a", 1e6, links=0b0111)], MESH, params=QUIET).makespan == approx(40 / 3 * US)


def test_transfers_share_only_common_links():
    same = [comm("a", 1e6, links=0b0001), comm("b", 1e6, stream="comm2", links=0b0001)]
    assert simulate(same, MESH, params=QUIET).makespan == approx(80 * US)
    apart = [comm("a", 1e6, links=0b0001), comm("b", 1e6, stream="comm2", links=0b0010)]
    assert simulate(apart, MESH, params=QUIET).makespan == approx(40 * US)
    # a: links 0,1 (half of link 0 + all of link 1 while b runs) ; b: link 0 shared
    mixed = [comm("a", 1e6, links=0b0011), comm("b", 0.25e6, stream="comm2", links=0b0001)]
    tl = simulate(mixed, MESH, params=QUIET)
    assert tl.get("b").end == approx(0.25e6 / 1.25e10)
    t_b = 0.25e6 / 1.25e10
    assert tl.get("a").end == approx(t_b + (1e6 - 3.75e10 * t_b) / 5e10)


def test_hbm_serves_compute_first_then_comm_by_priority():
    # GEMM draws 9e11 B/s at full speed, comm 1e11 B/s x 2 HBM bytes per byte = 2e11: 1.1x oversubscribed;
    # the GEMM is served first, the comm gets the remaining 1e11 B/s (half its speed) until the GEMM ends
    g = comp("g", 10 * US, hbm=9e11)
    c = comm("c", 1e6, bw=1e11, hbm=2.0)
    for streams in ((), (Stream("comm", 1),)):
        tl = simulate([g, c], RES, streams, params=QUIET)
        assert tl.get("g").end == approx(10 * US)
        assert tl.get("c").end == approx(10 * US + (1e6 - 5e10 * 10 * US) / 1e11)
    # two transfers: the higher-priority one is served first
    c2 = comm("c2", 1e6, stream="comm2", bw=1e11, hbm=2.0)
    res = Resources(sms=100, hbm_bw=2e11, dma_engines=0, link_bw=2e11)
    tl = simulate([c, c2], res, (Stream("comm2", 1),), params=QUIET)
    assert tl.get("c2").end == approx(10 * US)
    assert tl.get("c").end == approx(20 * US)


def test_interference_slows_the_gemm():
    p = QUIET.with_(gemm_interference=0.5)
    tasks = [comp("g", 10 * US), comm("c", 1e6, bw=1e11, hbm=2.0)]  # comm uses 2e11 of 1e12: u = 0.2
    tl = simulate(tasks, RES, params=p)
    assert tl.get("c").end == approx(10 * US)
    done = 10 * US / 1.1
    assert tl.get("g").end == approx(10 * US + (10 * US - done))


def test_latencies_before_and_after_work():
    tasks = [comm("c", 1e6, bw=1e11, pre=1 * US, post=2 * US), comp("g", 1 * US, deps=("c",))]
    tl = simulate(tasks, RES, params=QUIET)
    c = tl.get("c")
    assert (c.start, c.work_start, c.work_end, c.end) == (0.0, approx(1 * US), approx(11 * US), approx(13 * US))
    assert c.alone == approx(13 * US)
    assert tl.get("g").start == approx(13 * US)


def test_totals_and_exposed_comm():
    tasks = [comm("c", 1e6, bw=1e11), comp("g", 4 * US, deps=("c",))]
    tot = simulate(tasks, RES, params=QUIET).totals()
    assert tot["makespan"] == approx(14 * US)
    assert tot["comp_busy"] == approx(4 * US)
    assert tot["exposed_comm"] == approx(10 * US)


def test_perfetto_json_has_the_events():
    tasks = [comp("g", 10 * US), comm("c", 1e6, sms=10, bw=1e11)]
    tl = simulate(tasks, RES, [Stream("comm", 1)], params=QUIET, record=True)
    doc = json.loads(tl.perfetto_json())
    ev = doc["traceEvents"]
    xs = {e["name"]: e for e in ev if e["ph"] == "X" and e["pid"] == 1}
    assert set(xs) == {"g", "c"}
    assert xs["g"]["dur"] == pytest.approx(11.0)
    assert xs["c"]["ts"] == 0.0 and xs["c"]["dur"] == pytest.approx(10.0)
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 1}
    assert names == {"compute (priority 0)", "comm (priority 1)"}
    counters = [e for e in ev if e["ph"] == "C"]
    assert counters and counters[0]["args"]["sms"] == pytest.approx(100.0)
    assert tl.utilization()["sms"] == pytest.approx(1.0)
    assert tl.utilization()["link"] == pytest.approx(10 / 11)


@pytest.mark.parametrize("tasks, msg", [
    ([comp("a", 1.0, deps=("b",)), comp("b", 1.0, stream="s2", deps=("a",))], "never start"),
    ([comp("a", 1.0, deps=("zz",))], "unknown task"),
    ([comm("a", 1.0, engines=3)], "DMA engines"),
    ([comp("a", -1.0)], "out-of-range"),
    ([comp("a", 1.0), comp("a", 1.0)], "two tasks"),
    ([Task("a", "s", 1.0, kind="gemm")], "kind"),
])
def test_bad_tasks(tasks, msg):
    with pytest.raises(SimError, match=msg):
        simulate(tasks, RES, params=QUIET)


@given(st.lists(st.tuples(st.floats(1e-7, 1e-3), st.booleans(), st.integers(0, 50)), min_size=1, max_size=8))
def test_one_stream_is_the_sum_of_alone_times(spec):
    tasks = []
    for j, (w, is_comm, sms) in enumerate(spec):
        if is_comm:
            tasks.append(Task(f"t{j}", "s", w * 1e11, kind="comm", sms=sms, bw=1e11, pre=1e-6, post=1e-6, hbm=2.0))
        else:
            tasks.append(Task(f"t{j}", "s", w, tiles=sms * 7, hbm=5e11, phi=0.5))
    tl = simulate(tasks, RES)
    assert tl.makespan == pytest.approx(sum(alone_time(t, RES) for t in tasks), rel=1e-9)


@given(st.lists(st.tuples(st.floats(1e-7, 1e-4), st.integers(0, 3), st.integers(0, 30), st.booleans()),
                min_size=1, max_size=10))
def test_contention_never_beats_the_critical_path(spec):
    tasks = []
    for j, (w, s, sms, is_comm) in enumerate(spec):
        deps = (f"t{j - 1}",) if j and j % 3 == 0 else ()
        if is_comm:
            tasks.append(Task(f"t{j}", f"s{s}", w * 1e11, kind="comm", deps=deps, sms=sms, bw=1e11, hbm=2.0))
        else:
            tasks.append(Task(f"t{j}", f"s{s}", w, deps=deps, hbm=3e11))
    tl = simulate(tasks, RES, [Stream("s1", 1)])
    for iv, t in zip(tl.intervals, tasks):
        assert iv.end - iv.start >= alone_time(t, RES) * (1 - 1e-9)
    per_stream = {}
    for t in tasks:
        per_stream[t.stream] = per_stream.get(t.stream, 0.0) + alone_time(t, RES)
    assert tl.makespan >= max(per_stream.values()) * (1 - 1e-9)


def test_intervals_per_resource_and_in_the_trace():
    tasks = [comp("g", 10 * US), comm("c", 1e6, sms=10, bw=1e11), comm("d", 1e6, stream="copy", engines=1)]
    tl = simulate(tasks, RES, params=QUIET)
    assert [i.name for i in tl.by_resource("sms")] == ["g", "c"]
    assert [i.name for i in tl.by_resource("dma")] == ["d"]
    assert {i.name for i in tl.by_resource("links")} == {"c", "d"}
    ev = json.loads(tl.perfetto_json())["traceEvents"]
    held = {(e["tid"], e["name"]) for e in ev if e["ph"] == "X" and e["pid"] == 2}
    assert held == {(1, "g"), (1, "c"), (2, "d"), (3, "c"), (3, "d")}


def test_makespan_is_the_timelines_makespan():
    """makespan() runs the same event loop as simulate() without building the timeline: the same end time."""
    from c3kit.overlap import OverlapProblem
    from c3kit.overlap.costs import CostCache
    from c3kit.overlap.evaluate import applicable, default_params
    from c3kit.overlap.schedules import SCHEDULES, Ctx, build
    from c3kit.sim.engine import makespan

    from c3kit.hw import get_gpu

    g = get_gpu("H200")
    prob = OverlapProblem("gemm_rs", 8192, 4096, 2048, gpus=8)
    p = default_params(g.name)
    ctx = Ctx(prob, g, p, CostCache(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic))
    for name in applicable(prob, g):
        tasks, streams = build(SCHEDULES[name], ctx, "sm")
        assert makespan(tasks, ctx.res, streams, p) == simulate(tasks, ctx.res, streams, p).makespan, name
    assert makespan([], ctx.res) == 0.0


# --- compute_rates: the simulator's sharing of SMs and HBM between kernels, as the selector reads it ------------
def test_compute_rates_two_gemms_filling_the_gpu_run_at_half_speed():
    from c3kit.sim.engine import compute_rates

    a, b = comp("a", 10 * US), comp("b", 10 * US, "other")
    assert compute_rates((a, b), 100, 1e12) == [approx(0.5), approx(0.5)]
    assert compute_rates((a,), 100, 1e12) == [approx(1.0)]
    # higher priority first: the priority kernel keeps every SM
    assert compute_rates((a, b), 100, 1e12, (1, 0)) == [approx(1.0), approx(0.0)]


def test_compute_rates_memory_bound_kernels_share_hbm():
    from c3kit.sim.engine import compute_rates

    # memory-bound (phi 0): half the SMs cost nothing, HBM demand 1.6e12 > 1e12 scales both to 1e12 / 1.6e12
    a, b = comp("a", 10 * US, hbm=8e11, phi=0.0), comp("b", 10 * US, "other", hbm=8e11, phi=0.0)
    assert compute_rates((a, b), 100, 1e12) == [approx(0.625), approx(0.625)]


def test_compute_rates_rejects_a_transfer():
    from c3kit.sim.engine import compute_rates

    with pytest.raises(SimError):
        compute_rates((comp("a", 1 * US), comm("c", 1e6)), 100, 1e12)
    with pytest.raises(SimError):
        compute_rates((), 100, 1e12)


@given(sa=st.integers(1, 100), sb=st.integers(1, 100), ta=st.integers(0, 300), tb=st.integers(0, 300),
       ha=st.floats(0, 2e12), hb=st.floats(0, 2e12), pa=st.floats(0, 1), pb=st.floats(0, 1))
def test_compute_rates_are_the_simulators_rates(sa, sb, ta, tb, ha, hb, pa, pb):
    from c3kit.sim.engine import compute_rates

    # two kernels whose work is in proportion to their pair rates end together, at T, in the simulator
    a = comp("a", 1.0, sms=float(sa), tiles=ta, hbm=ha, phi=pa)
    b = comp("b", 1.0, "other", sms=float(sb), tiles=tb, hbm=hb, phi=pb)
    ra, rb = compute_rates((a, b), 100, 1e12)
    if ra <= 0 or rb <= 0:
        return
    T = 10 * US
    tl = simulate([a._replace(work=ra * T), b._replace(work=rb * T)], RES, [Stream("compute"), Stream("other")],
                  ContentionParams(gemm_interference=0.0, gemm_mem_interference=0.0, comm_interference=0.0))
    assert [iv.end for iv in tl.intervals] == [pytest.approx(T, rel=1e-9)] * 2
