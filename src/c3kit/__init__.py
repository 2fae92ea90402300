"""c3kit: computation, communication and memory performance of distributed ML on GPUs."""

__version__ = "0.1.0"

from c3kit.api import AnalyzeResult, analyze  # noqa: E402 - light: heavy imports happen inside analyze()

__all__ = ["AnalyzeResult", "analyze", "__version__"]
