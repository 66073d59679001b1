"""Holodesk: a desktop assistant that proposes one action at a time and performs it once approved."""

__version__ = "0.1.0"
