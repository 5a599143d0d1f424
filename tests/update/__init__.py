"""Helpers for the model-update tests: keys, signed deploys, adversarial models."""
