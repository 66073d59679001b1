"""Policies turn an observation (frame + task + history) into a Proposal.

Only this package imports torch / transformers, and only lazily inside the local runtime.
"""
