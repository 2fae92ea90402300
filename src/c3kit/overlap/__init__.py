"""Overlap engine: patterns, the schedule design space, evaluation on the simulator, and the selector.

Public API: OverlapProblem, PATTERNS, SCHEDULES, ScheduleSpec, evaluate, ScheduleResult, baseline, select.
"""

from c3kit.overlap.evaluate import Baseline, ScheduleResult, applicable, baseline, best, evaluate
from c3kit.overlap.heuristic import select
from c3kit.overlap.problem import PATTERNS, OverlapProblem
from c3kit.overlap.schedules import SCHEDULES, ScheduleSpec, get_schedule

__all__ = ["PATTERNS", "SCHEDULES", "Baseline", "OverlapProblem", "ScheduleResult", "ScheduleSpec", "applicable",
           "baseline", "best", "evaluate", "get_schedule", "select"]
