"""c3kit: computation, communication and memory performance of distributed ML on GPUs."""

__version__ = "0.1.0"
