"""Loaders for the studies' real data sets (validated, with clear errors)."""
