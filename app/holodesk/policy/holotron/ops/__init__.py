"""Fused kernels of the static decoder, each next to its torch reference.

* :mod:`.gemv` -- matrix-vector products for one-token decode (``F.linear`` or a Triton kernel chosen per
  weight shape at load); reference :func:`.gemv.gemv_reference`.
* :mod:`.prefill` -- causal conv1d with state and SiLU, in-place relu^2, residual add + RMSNorm, gated
  RMSNorm (Triton / mamba-ssm on CUDA); references ``*_reference`` in the same module.

The Triton sources are in ``_gemv_triton.py`` and ``_prefill_triton.py``; importing them needs Triton, so
the modules above fall back to the references (CPU) when it is missing.
"""
