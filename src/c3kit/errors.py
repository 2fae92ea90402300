"""One exception family per layer; the CLI turns any C3kitError into one line and exit code 2."""


class C3kitError(ValueError):
    """Bad input or an impossible request: the message says what was wrong and how to fix it."""


class HardwareError(C3kitError):
    """Unknown hardware, a malformed catalog entry, or a bad scaling rule."""


class WorkloadError(C3kitError):
    """Unknown model, malformed config.json, or a parallelism that does not divide."""


class MemoryFitError(WorkloadError):
    """A configuration whose per-GPU memory exceeds the GPU's capacity."""


class CostError(C3kitError):
    """An op the cost models cannot time, or a malformed calibration table."""


class SimError(C3kitError):
    """A timeline that cannot be simulated (cycle, unknown resource, bad parameter)."""


class OverlapError(C3kitError):
    """A schedule that cannot run this op on this hardware, or sizes that do not divide."""


class StudyError(C3kitError):
    """A study asked for with bad options."""


class PimError(C3kitError):
    """A PIM configuration or GEMV that cannot be modelled or placed."""


class RuntimeSetupError(C3kitError):
    """The PyTorch runtime cannot run this op here (missing torch, bad shapes, no GPU)."""
