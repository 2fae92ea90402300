"""Shipped fits of the GEMM efficiency curve, keyed by the SHA-256 of the calibration table they came from.

Fitting the curve to a measured table takes seconds; every process (each CLI call, each runtime rank)
would pay that. The fit is a pure function of the table, so it is stored next to it as
<gpu>-gemm-fit.json and used only while the table's hash still matches; otherwise the caller refits.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from c3kit.cost.efficiency import EfficiencyCurve


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def fit_path(table_path: str | Path) -> Path:
    """The fit file that belongs to a gemm calibration file (…-gemm.json -> …-gemm-fit.json)."""
    from c3kit.cost.calib_store import variant_path

    return variant_path(table_path, "fit")


def load_fit(table_path: str | Path) -> EfficiencyCurve | None:
    """The stored curve for this table, or None when absent, unreadable or made from another table."""
    fp = fit_path(table_path)
    try:
        doc = json.loads(fp.read_text())
        if doc.get("source_sha256") != file_sha256(table_path):
            return None
        return EfficiencyCurve.from_dict(doc["curve"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_fit(table_path: str | Path, curve: EfficiencyCurve, gpu_name: str) -> Path:
    """Store a curve fitted to table_path beside it, with the table's hash and how it was made."""
    fp = fit_path(table_path)
    doc = {"kind": "gemm-fit", "gpu": gpu_name, "source": Path(table_path).name,
           "source_sha256": file_sha256(table_path),
           "made": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "how": "c3kit.cost.efficiency.fit_efficiency(table, gpu) via benchmarks/refit_gemm_curve.py",
           "curve": curve.to_dict()}
    fp.write_text(json.dumps(doc, indent=1) + "\n")
    return fp
