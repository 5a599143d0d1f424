"""Offline model work: export (needs the ``export`` extra's venv), quantize, evaluate."""
