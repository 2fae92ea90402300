"""Timeline simulator: tasks on prioritized streams sharing SMs, HBM, DMA engines and links (docs/sim.md)."""

from c3kit.sim.engine import Resources, Stream, Task, alone_time, simulate
from c3kit.sim.params import ContentionParams, calibration_path
from c3kit.sim.timeline import Interval, Segment, Timeline

__all__ = ["ContentionParams", "Interval", "Resources", "Segment", "Stream", "Task", "Timeline", "alone_time",
           "calibration_path", "simulate"]
