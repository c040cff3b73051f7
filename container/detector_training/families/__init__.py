"""Detector families: one module per family says how to build, feed, step and validate its networks."""
