"""Microbenchmarks behind `c3kit bench`: each returns calibration columns and rows, never prints."""
