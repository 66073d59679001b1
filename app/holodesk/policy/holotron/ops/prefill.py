"""Prefill operations of the Nemotron-H blocks that the stock modules run as several unfused kernels.

Measured on one H200 (docs/benchmarks.md: a 2642-token 1080p prefill, 128 ms of GPU work, 3204 kernels),
transformers' Mamba-2 mixer without the ``causal-conv1d`` package spent 10.3 ms in ``F.conv1d`` (a generic
depthwise kernel), 7.3 ms concatenating the conv state in front of every chunk, 2.6 ms in a separate SiLU
and ~5.6 ms copying the transposed conv output back to a token-major layout; the block RMSNorm (float32
torch ops: cast, square, mean, rsqrt, two products, cast back) took about 12 ms; the MLP's relu^2 2.8 ms
in two passes. This module gives each one kernel on CUDA:

* :func:`causal_conv1d` -- depthwise causal convolution with the stored past as the left context, bias and
  SiLU fused, reading the ``xBC`` columns straight out of ``in_proj``'s output (token-major, strided) and
  writing token-major, so the chunk scan gets contiguous ``x``/``B``/``C`` without copies; the conv state is
  then set to the last ``width`` inputs. The maths is ``causal_conv1d_fn`` of Dao's causal-conv1d
  (``initial_states`` form); the kernel is ours (:mod:`._prefill_triton`).
* :func:`relu_square_` -- ``relu(x)^2`` in one in-place pass (``ReLUSquaredActivation``, So et al. 2021).
* :func:`add_rms_norm` -- ``h += pending`` and ``rmsnorm(h)`` in one pass, through mamba-ssm's fused
  layer-norm kernel (``ops.triton.layer_norm.rms_norm_fn``, ``prenorm=True``), float32 inside, as
  ``NemotronHRMSNorm``.
* :func:`gated_rms_norm` -- the Mamba-2 mixer's gated RMSNorm through mamba-ssm's
  ``ops.triton.layernorm_gated.rmsnorm_fn`` (``norm_before_gate=False``).

Each has a torch reference (``*_reference``) with the stock modules' maths, used off CUDA (the CPU tests)
and by the tests that compare the kernels against it. :func:`fused_available` says whether the CUDA
kernels can run.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

try:  # pragma: no cover - depends on the machine
    from holodesk.policy.holotron.ops import _prefill_triton as _kernels

    HAVE_TRITON = True
except Exception as _exc:  # no Triton: the torch references only
    log.debug("Triton prefill kernels unavailable (%s: %s)", type(_exc).__name__, _exc)
    _kernels = None  # type: ignore[assignment]
    HAVE_TRITON = False


@functools.cache
def _mamba_fn(module: str, name: str) -> Callable[..., Any] | None:
    """mamba-ssm's fused entry point ``name`` of ``mamba_ssm.ops.triton.<module>`` (``layer_norm.rms_norm_fn``,
    ``layernorm_gated.rmsnorm_fn``), or None when mamba-ssm is missing or unusable; looked up once (it is asked
    per block per chunk)."""
    try:
        return getattr(importlib.import_module(f"mamba_ssm.ops.triton.{module}"), name)
    except Exception as exc:  # mamba-ssm missing or unusable
        log.debug("mamba-ssm %s.%s unavailable (%s: %s)", module, name, type(exc).__name__, exc)
        return None


def _mamba_rms_norm_fn() -> Callable[..., Any] | None:
    """mamba-ssm's fused RMSNorm, or None."""
    return _mamba_fn("layer_norm", "rms_norm_fn")


def _mamba_gated_norm_fn() -> Callable[..., Any] | None:
    """mamba-ssm's fused gated RMSNorm, or None."""
    return _mamba_fn("layernorm_gated", "rmsnorm_fn")


def fused_available(device: torch.device) -> str | None:
    """Why the fused prefill kernels cannot run on ``device`` (a ``torch.device``), or None when they can.

    They need a CUDA device, Triton and mamba-ssm (for :func:`add_rms_norm`).
    """
    if getattr(device, "type", str(device)) != "cuda":
        return "not a CUDA device"
    if not HAVE_TRITON:
        return "Triton is not importable"
    if _mamba_rms_norm_fn() is None:
        return "mamba-ssm's layer_norm kernels are not importable"
    return None


def causal_conv1d_reference(x: torch.Tensor, state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                            silu: bool) -> torch.Tensor:
    """The torch maths of :func:`causal_conv1d` (transformers' ``update_conv_state`` + ``causal_conv1d_fn``).

    Args/Returns: as :func:`causal_conv1d` (``state`` is updated in place).
    """
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F

    seq_len = x.shape[1]
    width = state.shape[-1]
    full = torch.cat([state, x.transpose(1, 2).to(state.dtype)], dim=-1)
    state.copy_(full[..., -width:])
    out = F.conv1d(full.to(weight.dtype), weight.unsqueeze(1), bias, padding=0, groups=weight.shape[0])
    out = out[..., -seq_len:]
    if silu:
        out = F.silu(out)
    return out.transpose(1, 2).to(x.dtype).contiguous()


def set_conv_state_reference(state: torch.Tensor, x: torch.Tensor, length: torch.Tensor) -> None:
    """:func:`set_conv_state` in torch ops (about ten small kernels on a GPU)."""
    import torch  # lazy: torch (optional, heavy)

    width = state.shape[-1]
    idx = length - width + torch.arange(width, device=x.device)  # input index of each kept column
    from_x = x.index_select(1, idx.clamp(min=0)).transpose(1, 2).to(state.dtype)  # [B, D, W]
    from_past = state.index_select(-1, (idx + width).clamp(0, width - 1))
    state.copy_(torch.where(idx >= 0, from_x, from_past))


def set_conv_state(state: torch.Tensor, x: torch.Tensor, length: torch.Tensor) -> None:
    """Set ``state [B, D, W]`` to the last ``W`` inputs of ``past + x[:, :length]``, with ``length`` a
    device tensor (``[1]`` int64, ``1 <= length <= T``): the rows of ``x`` ``[B, T, D]`` past it are padding.
    Index arithmetic on the device only, so a CUDA graph can capture it and replay it for any length: on
    CUDA with Triton one kernel (``x``'s last dim and ``state``'s contiguous), elsewhere
    :func:`set_conv_state_reference`; the same values either way (a gather, no arithmetic)."""
    if not (x.is_cuda and HAVE_TRITON and x.stride(-1) == 1 and state.stride(-1) == 1):
        set_conv_state_reference(state, x, length)
        return
    set_conv_state_triton(state, x, length)


def set_conv_state_triton(state: torch.Tensor, x: torch.Tensor, length: torch.Tensor) -> None:
    """:func:`set_conv_state` by the Triton kernel (CUDA tensors, or CPU tensors under Triton's interpreter);
    ``x``'s and ``state``'s last dims contiguous."""
    bsz, _, dim = x.shape
    width = state.shape[-1]
    block_d = 128
    _kernels.conv_state_kernel[(bsz, (dim + block_d - 1) // block_d)](
        x, state, length, dim, x.stride(0), x.stride(1), state.stride(0), state.stride(1),
        WIDTH=width, BLOCK_W=max(2, 1 << (width - 1).bit_length()), BLOCK_D=block_d, num_warps=4)


def step_size_reference(dt: torch.Tensor, dt_bias: torch.Tensor, length: torch.Tensor,
                        dt_limit: tuple[float, float]) -> torch.Tensor:
    """:func:`step_size` in torch ops (transformers' ``softplus`` and ``clamp``, then the padded rows zeroed;
    about seven small kernels on a GPU)."""
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F

    step = F.softplus(dt.float() + dt_bias.float()).clamp(*dt_limit)
    return step.masked_fill((torch.arange(dt.shape[1], device=dt.device) >= length)[None, :, None], 0.0)


def step_size(dt: torch.Tensor, dt_bias: torch.Tensor, length: torch.Tensor,
              dt_limit: tuple[float, float]) -> torch.Tensor:
    """The Mamba-2 step size of a padded chunk: ``clamp(softplus(dt + dt_bias), *dt_limit)`` in float32 on
    the rows before ``length`` (``[1]`` int64 on the device) and exactly 0 on the padded rows after it, so a
    padded row leaves the SSM state as it was (``exp(0 * A) = 1``, ``0 * B x = 0``).

    Args:
        dt: ``[B, T, heads]`` raw step (``in_proj``'s last columns; the last dim must have stride 1 on CUDA).
        dt_bias: ``[heads]``.
        length: ``[1]`` int64, real rows of the chunk.
        dt_limit: ``(low, high)`` clamp (``NemotronHMamba2Mixer.time_step_limit``; ``high`` may be inf).
    Returns:
        ``[B, T, heads]`` float32, contiguous. On CUDA with Triton one kernel; elsewhere
        :func:`step_size_reference`.
    """
    if not (dt.is_cuda and HAVE_TRITON and dt.stride(-1) == 1):
        return step_size_reference(dt, dt_bias, length, dt_limit)
    return step_size_triton(dt, dt_bias, length, dt_limit)


def step_size_triton(dt: torch.Tensor, dt_bias: torch.Tensor, length: torch.Tensor,
                     dt_limit: tuple[float, float]) -> torch.Tensor:
    """:func:`step_size` by the Triton kernel (CUDA tensors, or CPU tensors under Triton's interpreter);
    ``dt``'s last dim contiguous."""
    import torch  # lazy: torch (optional, heavy)

    bsz, rows, heads = dt.shape
    out = torch.empty(bsz, rows, heads, dtype=torch.float32, device=dt.device)
    block_t = 32
    _kernels.step_size_kernel[(bsz, (rows + block_t - 1) // block_t)](
        dt, dt_bias, length, out, rows, heads, dt.stride(0), dt.stride(1), out.stride(0), out.stride(1),
        float(dt_limit[0]), float(dt_limit[1]), BLOCK_T=block_t,
        BLOCK_H=max(16, 1 << (heads - 1).bit_length()), num_warps=4)
    return out


def causal_conv1d(x: torch.Tensor, state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                  silu: bool = True, length: torch.Tensor | None = None) -> torch.Tensor:
    """Depthwise causal conv over a chunk, continuing from ``state``, and the state after it.

    ``out[b, t, d] = act(bias[d] + sum_k weight[d, k] * src[b, t + k + 1 - width, d])`` where ``src`` is the
    chunk for indices ``>= 0`` and the stored past (``state[b, d, width + j]``) for ``j < 0``; then
    ``state`` holds the last ``width`` inputs of ``past + chunk``, as transformers' conv cache does.

    Args:
        x: ``[B, T, D]`` chunk input, token-major; the last dim must have stride 1 (a column slice of a
            wider projection is fine).
        state: ``[B, D, width]`` stored past inputs, updated in place (model dtype).
        weight: ``[D, width]`` depthwise taps (``conv1d.weight.squeeze(1)``).
        bias: ``[D]`` or None.
        silu: apply SiLU (the Mamba-2 mixer's activation) to the sum.
        length: None, or a ``[1]`` int64 device tensor: only ``x[:, :length]`` is real input (the rest is
            padding, whose outputs are garbage) and the state is taken at ``length`` (:func:`set_conv_state`).
    Returns:
        ``[B, T, D]`` contiguous, ``x``'s dtype.
    Raises:
        ValueError: shapes disagree, or ``x``'s last dim is not contiguous (on CUDA).
    """
    import torch  # lazy: torch (optional, heavy)

    bsz, seq_len, dim = x.shape
    width = state.shape[-1]
    if state.shape[:2] != (bsz, dim) or tuple(weight.shape) != (dim, width):
        raise ValueError(f"conv shapes disagree: x {tuple(x.shape)}, state {tuple(state.shape)}, "
                         f"weight {tuple(weight.shape)}")
    if not (x.is_cuda and HAVE_TRITON):
        if length is None:
            return causal_conv1d_reference(x, state, weight, bias, silu)
        out = causal_conv1d_reference(x, state.clone(), weight, bias, silu)
        set_conv_state(state, x, length)
        return out
    if x.stride(-1) != 1 or state.stride(-1) != 1 or weight.stride(-1) != 1:
        raise ValueError("causal_conv1d needs the last dim of x, state and weight contiguous")
    out = torch.empty(bsz, seq_len, dim, dtype=x.dtype, device=x.device)
    block_t, block_d = 32, 128
    grid = (bsz, (seq_len + block_t - 1) // block_t, (dim + block_d - 1) // block_d)
    _kernels.causal_conv1d_kernel[grid](
        x, state, weight, bias if bias is not None else weight, out,
        seq_len, dim, x.stride(0), x.stride(1), state.stride(0), state.stride(1), weight.stride(0),
        out.stride(0), out.stride(1),
        WIDTH=width, HAS_BIAS=bias is not None, SILU=silu, BLOCK_T=block_t, BLOCK_D=block_d, num_warps=4)
    # The kernel has read the old state (stream order); now keep the last ``width`` inputs.
    if length is not None:
        set_conv_state(state, x, length)
    elif seq_len >= width:
        state.copy_(x[:, seq_len - width :].transpose(1, 2))
    else:
        state.copy_(torch.cat([state[..., seq_len:], x.transpose(1, 2).to(state.dtype)], dim=-1))
    return out


def relu_square_reference(x: torch.Tensor) -> torch.Tensor:
    """``x = relu(x) ** 2`` in place by torch's ``relu_`` then ``square_`` (relu is exact, the square
    rounds once, as the kernel does); returns ``x``."""
    x.relu_()
    return x.square_()


def relu_square_(x: torch.Tensor) -> torch.Tensor:
    """``x = relu(x) ** 2`` in place (the MLP activation ``relu2``); returns ``x``.

    On CUDA with Triton one pass over a contiguous ``x``; elsewhere :func:`relu_square_reference`.
    """
    if x.is_cuda and HAVE_TRITON and x.is_contiguous():
        n = x.numel()
        block = 4096
        _kernels.relu_square_kernel[((n + block - 1) // block,)](x, n, BLOCK=block, num_warps=8)
        return x
    return relu_square_reference(x)


def rms_norm_reference(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``NemotronHRMSNorm``: float32 ``h * rsqrt(mean(h^2) + eps) * weight``, cast to ``h``'s dtype.

    ``weight`` may already be float32 (the decoder passes a float32 copy so ``.float()`` is free).
    """
    import torch  # lazy: torch (optional, heavy)

    hf = h.float()
    hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return (weight.float() * hf).to(h.dtype)


def gated_rms_norm_reference(y: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float,
                             group_size: int) -> torch.Tensor:
    """``NemotronHRMSNormGated`` with a gate: float32 ``y * silu(gate)`` normalised per group of
    ``group_size`` channels, cast to ``weight``'s dtype (the model dtype), times ``weight``.
    ``y``, ``gate`` ``[..., I]`` (``y`` may be float32)."""
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F

    g = y.float() * F.silu(gate.float())
    *prefix, width = g.shape
    grouped = g.view(*prefix, width // group_size, group_size)
    grouped = grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + eps)
    return weight * grouped.view(*prefix, width).to(weight.dtype)


def gated_rms_norm(y: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float,
                   group_size: int) -> torch.Tensor:
    """:func:`gated_rms_norm_reference` in one kernel on CUDA with mamba-ssm (its ``rmsnorm_fn`` with
    ``norm_before_gate=False``: ``w * rmsnorm(y * silu(z))`` per group, float32 inside); the reference
    elsewhere. Returns ``y``'s shape (the kernel: in ``y``'s dtype; the reference: ``weight``'s)."""
    fn = _mamba_gated_norm_fn() if y.is_cuda else None
    if fn is None:
        return gated_rms_norm_reference(y, gate, weight, eps, group_size)
    shape = y.shape
    x = y.reshape(-1, shape[-1])
    z = gate.reshape(-1, shape[-1])
    out = fn(x if x.stride(-1) == 1 else x.contiguous(), weight, None, z=z if z.stride(-1) == 1 else z.contiguous(),
             eps=eps, group_size=group_size, norm_before_gate=False)
    return out.reshape(shape)


def add_rms_norm_reference(pending: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor, eps: float
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`add_rms_norm` in torch: the sum rounded to ``h``'s dtype, then :func:`rms_norm_reference`."""
    if pending is not None:
        h = h + pending
    return rms_norm_reference(h, weight, eps), h


def add_rms_norm_row(h: torch.Tensor, pending: torch.Tensor | None, weight: torch.Tensor, eps: float
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """A decode step's residual add and the next block's RMSNorm: ``(s, rmsnorm(s) * weight)`` with
    ``s = h + pending`` rounded to ``h``'s dtype, both ``[B, H]`` in that dtype (``pending`` None: ``s = h``).

    On CUDA with Triton one program a row (``torch.ops.holodesk.add_rms_norm``): the row's loads in one trip
    to memory. For Holotron-12B's ``[1, 5120]`` on an H200: 3.1 us a call in a decode step, where the compiled
    torch maths (a looped reduction, its weight evicted from L2 by the matrix-vector product before it) took
    3.9 us (docs/benchmarks.md, run 14). Elsewhere :func:`add_rms_norm_reference`. Both normalise
    the rounded sum in float32 and round once; they differ only in the order of the float32 sum of squares.

    Args:
        h: ``[B, H]`` residual stream (last dimension contiguous).
        pending: ``[B, H]`` the previous block's output, or None.
        weight: ``[H]`` the norm's weight (float32 in the decoder).
        eps: the norm's epsilon.
    """
    if pending is not None and h.is_cuda and HAVE_TRITON and h.dim() == 2 and h.stride(-1) == 1 \
            and pending.stride(-1) == 1 and weight.is_contiguous():
        import torch  # lazy: torch (optional, heavy)

        return torch.ops.holodesk.add_rms_norm(h, pending, weight, eps)
    x, s = add_rms_norm_reference(pending, h, weight, eps)
    return s, x


def add_rms_norm(pending: torch.Tensor | None, h: torch.Tensor, weight: torch.Tensor, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Add a block's output to the residual stream and normalise for the next block, in one pass.

    Args:
        pending: ``[B, T, H]`` output of the previous mixer, or None (the first block: nothing to add).
        h: ``[B, T, H]`` residual stream.
        weight: ``[H]`` the next block's norm weight.
        eps: its epsilon.
    Returns:
        ``(rmsnorm(h + pending) * weight, h + pending)`` in ``h``'s dtype. On CUDA the sum is kept in
        float32 for the norm (mamba-ssm's kernel) and rounded once for the stream; the stock block
        normalises the rounded sum, so the two differ within one rounding of the model dtype.
    """
    if h.is_cuda:
        fn = _mamba_rms_norm_fn()
        if fn is not None:
            if pending is None:
                return fn(h, weight, None, eps=eps), h
            return fn(pending, weight, None, residual=h, prenorm=True, eps=eps)
    return add_rms_norm_reference(pending, h, weight, eps)
