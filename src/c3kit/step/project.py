"""Project a StepGraph on a GPU: time every node with c3kit.cost, then overlap them by the plan."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Callable

import numpy as np

from c3kit.hw.model import GPU
from c3kit.workload.ops import Collective
from c3kit.step.placement import dp_per_node, placed, placement  # noqa: F401 (re-exported)
from c3kit.step.plan import Plan, evaluate, make_plan
from c3kit.step.policy import DEFAULT_POLICY, OverlapPolicy
from c3kit.step.tpcomm import bind_policy


@dataclass(frozen=True)
class OpRow:
    """One node of the step, per GPU per step: compute, comm, exposed and hidden comm seconds, share of step."""

    id: int
    name: str
    role: str
    phase: str
    scope: str
    stream: str
    runs: int  # how many times it runs per step
    time_each: float  # s, one run alone
    compute_s: float
    comm_s: float
    exposed_s: float
    hidden_s: float
    share: float  # (compute + exposed) / step time
    schedule: str = ""  # how a collective (and its GEMM partner) ran: none, simple or an overlap schedule
    overlap_speedup: float = 1.0  # (GEMM + collective) / (GEMM + exposed collective) of its pair; 1 otherwise


@dataclass(frozen=True)
class StepTotals:
    """Totals of one step on one GPU (seconds unless named otherwise)."""

    compute: float
    comm: float
    exposed: float
    hidden: float
    bubble: float
    step_time: float
    comm_share: float  # comm / (compute + comm): the serialized share of communication
    exposed_share: float  # exposed / step time
    mfu: float  # model FLOPs (3 x forward) / (step time x peak FLOP/s)
    tokens_per_s: float  # all GPUs together
    model_flops: float  # per GPU per step
    hw_flops: float  # per GPU per step, recomputation included
    overhead: float = 0.0  # step-level overheads (step/overheads.py), included in step_time


@dataclass(frozen=True)
class StepResult:
    """A projected step: per-op rows, totals, and what was projected."""

    model: str
    hw: str
    phase: str
    seq: int
    gpus: int
    global_batch: int
    micro_batches: int
    policy: str
    rows: tuple[OpRow, ...]
    totals: StepTotals

    def frame(self):
        """The per-op rows as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.rows])

    def by_role(self):
        """Rows summed by (phase, role), sorted by share of step; schedule(s) and comm-weighted overlap speedup."""
        df = self.frame()
        cols = ["compute_s", "comm_s", "exposed_s", "hidden_s", "share"]
        grp = df.groupby(["role", "phase"], sort=False)
        g = grp[cols].sum().reset_index()
        g["schedule"] = grp["schedule"].agg(lambda s: "/".join(sorted({x for x in s if x}))).to_numpy()
        w = df["comm_s"].where(df["comm_s"] > 0, df["compute_s"]) + 1e-30
        df = df.assign(_w=w, _ws=w * df["overlap_speedup"])
        g["overlap_speedup"] = (df.groupby(["role", "phase"], sort=False)["_ws"].sum()
                                / df.groupby(["role", "phase"], sort=False)["_w"].sum()).to_numpy()
        return g.sort_values("share", ascending=False, kind="stable").reset_index(drop=True)

    def by_stream(self):
        """Communication per stream (tp, dp, ep, pp): comm, exposed and hidden seconds, hidden fraction."""
        import pandas as pd

        df = self.frame()
        df = df[df["comm_s"] > 0]
        g = df.groupby("stream", sort=False)[["comm_s", "exposed_s", "hidden_s"]].sum().reset_index()
        g["hidden_frac"] = g["hidden_s"] / g["comm_s"]
        return pd.DataFrame(g)

    def to_dict(self) -> dict:
        """Everything as plain JSON-ready data."""
        return {
            "model": self.model, "hw": self.hw, "phase": self.phase, "seq": self.seq, "gpus": self.gpus,
            "global_batch": self.global_batch, "micro_batches": self.micro_batches, "policy": self.policy,
            "totals": asdict(self.totals), "rows": [asdict(r) for r in self.rows],
            "streams": self.by_stream().to_dict(orient="records"),
        }


Timer = Callable[[object, GPU], float]


def step_timer(cost_model=None) -> Timer:
    """c3kit.cost.time under a cost model (None: roofline)."""
    from c3kit import cost
    from c3kit.cost.model import as_model

    m = as_model(cost_model)
    return lambda op, hw: cost.time(op, hw, m)


default_timer = step_timer


def node_times(graph, hw: GPU, timer: Timer | None = None) -> np.ndarray:
    """Seconds of one run of every node's op on hw (vector over nodes)."""
    timer = timer or step_timer()
    cache: dict = {}
    out = np.empty(len(graph.nodes))
    for i, nd in enumerate(graph.nodes):
        op = placed(nd, graph)
        t = cache.get(op)
        if t is None:
            t = cache[op] = float(timer(op, hw))
        out[i] = t
    return out


def project(graph, hw: GPU, *, policy: OverlapPolicy | None = None, timer: Timer | None = None,
            cost_model=None, plan: Plan | None = None, overheads=None) -> StepResult:
    """Project one step graph on one GPU type: per-op rows and totals (see c3kit.step.plan for the model).

    overheads: a step.overheads.OverheadModel whose terms are added to the step as rows
    "overhead.<name>" (None: the layer graph alone, as the vectorized sweep prices it).
    """
    policy = policy or DEFAULT_POLICY
    timer = timer or step_timer(cost_model)
    plan = plan or make_plan(graph)
    t = node_times(graph, hw, timer)
    # with the layout's TE userbuffers overlap (step/tpcomm.py), its engine prices at the cost model's GEMM clocks
    policy = bind_policy(policy, graph, hw, getattr(cost_model, "power", None))
    tl = evaluate(plan, t, policy)
    step = float(tl.step_time[0])
    sched, speed = _pair_columns(graph, plan, tl, policy)
    rows = []
    for i, nd in enumerate(graph.nodes):
        comp, comm, exp = float(tl.compute[i, 0]), float(tl.comm[i, 0]), float(tl.exposed[i, 0])
        rows.append(OpRow(
            id=int(nd.id), name=nd.op.name, role=nd.role or nd.op.name, phase=nd.phase, scope=nd.scope,
            stream=nd.stream, runs=int(plan.multiplicity[i]), time_each=float(t[i]), compute_s=comp, comm_s=comm,
            exposed_s=exp, hidden_s=max(comm - exp, 0.0), share=(comp + exp) / step if step > 0 else 0.0,
            schedule=sched.get(i, ""), overlap_speedup=speed.get(i, 1.0)))
    bubble = float(tl.bubble[0])
    if bubble > 0:
        rows.append(OpRow(id=-1, name="pipeline bubble", role="pp_bubble", phase="-", scope="step", stream="-",
                          runs=1, time_each=bubble, compute_s=0.0, comm_s=0.0, exposed_s=0.0, hidden_s=0.0,
                          share=bubble / step))
    tot = totals(graph, plan, hw, tl)
    if overheads is not None:
        rows, tot = _with_overheads(graph, hw, timer, plan, t, overheads, rows, tot)
    return StepResult(
        model=graph.model.name, hw=hw.name, phase=graph.phase, seq=int(graph.seq), gpus=int(graph.par.gpus),
        global_batch=int(graph.par.global_batch), micro_batches=int(graph.micro_batches),
        policy=getattr(policy, "name", type(policy).__name__), rows=tuple(rows), totals=tot)


def _with_overheads(graph, hw, timer, plan, t, model, rows, tot):
    """Rows and totals with the step-level overheads added on the critical path (step/overheads.py)."""
    from c3kit.step.overheads import step_overheads

    extra = [o for o in step_overheads(graph, hw, timer, plan, t, model) if o.seconds > 0]
    add = sum(o.seconds for o in extra)
    if add <= 0:
        return rows, tot
    step = tot.step_time + add
    rows = [replace(r, share=(r.compute_s + r.exposed_s) / step if r.id != -1 else r.time_each / step) for r in rows]
    rows += [OpRow(id=-2 - k, name=o.name, role="overhead." + o.name, phase="-", scope="step", stream="compute",
                   runs=int(round(o.runs)), time_each=o.seconds / o.runs if o.runs else o.seconds, compute_s=o.seconds,
                   comm_s=0.0, exposed_s=0.0, hidden_s=0.0, share=o.seconds / step) for k, o in enumerate(extra)]
    scale = tot.step_time / step
    tot = replace(tot, step_time=step, overhead=add, exposed_share=tot.exposed / step, mfu=tot.mfu * scale,
                  tokens_per_s=tot.tokens_per_s * scale)
    return rows, tot


def _pair_columns(graph, plan: Plan, tl, policy) -> tuple[dict, dict]:
    """schedule and overlap_speedup per node: every collective gets the policy's name (or the engine's
    schedule for its pair); a collective-GEMM pair's two rows get (g + m) / (g + exposed) per step."""
    from c3kit.step.pairs import find_pairs

    name = getattr(policy, "name", type(policy).__name__)
    sched: dict[int, str] = {}
    speed: dict[int, float] = {}
    for i, nd in enumerate(graph.nodes):
        if plan.is_comm[i]:
            sched[i] = policy.schedule_of(i) if hasattr(policy, "schedule_of") else name
    for i, pr in find_pairs(graph).items():
        g, m, x = float(tl.compute[pr.gemm, 0]), float(tl.comm[i, 0]), float(tl.exposed[i, 0])
        # the GEMM runs once per collective run; scale it to the collective's runs per step
        g *= plan.multiplicity[i] / plan.multiplicity[pr.gemm] if plan.multiplicity[pr.gemm] else 0.0
        speed[i] = speed[pr.gemm] = (g + m) / (g + x) if g + x > 0 else 1.0
        sched[pr.gemm] = sched[i]
    return sched, speed


def compare_overlap(graph, hw: GPU, *, timer: Timer | None = None, cost_model=None, power: str = "burst",
                    modes: tuple[str, ...] | None = None) -> list[dict]:
    """Step time, exposed communication and change against `simple` under none, simple, contended, auto and each
    schedule family (the op times are computed once; engine prices are cached by pair shape). The engine modes
    price the pairs the engine does not take with the default mode's rule (step.policy.policy_for)."""
    from c3kit.step.policy import BASE_MODES, FAMILIES, policy_for

    timer = timer or step_timer(cost_model)
    plan = make_plan(graph)
    t = node_times(graph, hw, timer)
    out = []
    for mode in modes or (*BASE_MODES, *FAMILIES):
        pol = bind_policy(policy_for(mode, power), graph, hw, power)
        tl = evaluate(plan, t, pol)
        out.append({"mode": mode, "step_time": float(tl.step_time[0]), "exposed": float(tl.exposed[:, 0].sum())})
    base = next((r["step_time"] for r in out if r["mode"] == "simple"), None)
    for r in out:
        r["vs_simple"] = r["step_time"] / base - 1.0 if base else 0.0
    return out


def model_flops(graph) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) per GPU per step; model = 3 x forward for training, forward otherwise."""
    fwd = hwf = 0.0
    for nd in graph.nodes:
        f = nd.op.flops * graph.repeats(nd)
        hwf += f
        if nd.phase == "fwd":
            fwd += f
    return (3.0 * fwd if graph.phase == "train" else fwd), hwf


def totals(graph, plan: Plan, hw: GPU, tl) -> StepTotals:
    """Totals of a one-scenario timeline."""
    compute = float(tl.compute[:, 0].sum())
    comm = float(tl.comm[:, 0].sum())
    exposed = float(tl.exposed[:, 0].sum())
    step = float(tl.step_time[0])
    mf, hwf = model_flops(graph)
    tokens = graph.tokens_per_micro * graph.micro_batches * graph.par.dp
    return StepTotals(
        compute=compute, comm=comm, exposed=exposed, hidden=max(comm - exposed, 0.0), bubble=float(tl.bubble[0]),
        step_time=step, comm_share=comm / (compute + comm) if compute + comm > 0 else 0.0,
        exposed_share=exposed / step if step > 0 else 0.0,
        mfu=mf / (step * hw.peak_flops(graph.dtype)) if step > 0 else 0.0,
        tokens_per_s=tokens / step if step > 0 else 0.0, model_flops=mf, hw_flops=hwf)
