"""Step projection: time every node of a step graph, overlap them where dependencies allow, report per op."""

from c3kit.step.plan import Plan, StepError, Timeline, evaluate, make_plan
from c3kit.step.policy import DEFAULT_POLICY, OverlapPolicy, SerialOverlap, SimpleOverlap, SlowdownOverlap
from c3kit.step.project import OpRow, StepResult, StepTotals, model_flops, node_times, project

__all__ = ["project", "StepResult", "StepTotals", "OpRow", "OverlapPolicy", "SimpleOverlap", "SerialOverlap",
           "SlowdownOverlap", "DEFAULT_POLICY", "Plan", "Timeline", "make_plan", "evaluate", "node_times",
           "model_flops", "StepError"]
