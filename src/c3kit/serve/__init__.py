"""Request-level LLM serving simulator: workloads, a vLLM-like scheduler, iterations priced by the step model."""

from c3kit.serve.kv import KVCapacity, kv_capacity
from c3kit.serve.metrics import SLO, Metrics, compute, parse_slo
from c3kit.serve.pricing import IterationPrice, StepPricer, price_iteration
from c3kit.serve.scheduler import Scheduler, SchedulerConfig
from c3kit.serve.sim import SimResult, simulate
from c3kit.serve.workload import ServeError, Workload, load_trace, parse_lengths, poisson

__all__ = ["kv_capacity", "KVCapacity", "SLO", "Metrics", "compute", "parse_slo", "IterationPrice", "StepPricer",
           "price_iteration", "Scheduler", "SchedulerConfig", "SimResult", "simulate", "ServeError", "Workload",
           "load_trace", "parse_lengths", "poisson"]
