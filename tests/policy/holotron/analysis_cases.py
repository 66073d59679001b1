"""A Triton kernel, in a form torch can analyse and one it cannot, for torch's analysis of user kernels (what a
kernel writes; torch copies every input of one it cannot analyse), and that analysis run offline.

:func:`analyse` calls torch's own analysis (``identify_accessed_tensors``, torch 2.13; ``identify_mutated_tensors``,
2.11) for a fake sm_90 device: :class:`FakeSm90Driver` stands in for Triton's CUDA driver, which a machine
without a GPU lacks; the analysis only asks it for the target and compiles the kernel to TTIR. torch reads
:func:`asm_copy` when its inline asm is pure and cannot read it when the asm has side effects
(``tt.elementwise_inline_asm`` with ``is_pure=False``: run 11c's failure on the GPU), so it then logs that it
assumes every input written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget


@triton.jit
def asm_copy(x_ptr, y_ptr, N: tl.constexpr, PURE: tl.constexpr):  # type: ignore[no-untyped-def]
    i = tl.arange(0, N)
    v = tl.inline_asm_elementwise("mov.u32 $0, $1;", "=r,r", [tl.load(x_ptr + i)], dtype=tl.int32, is_pure=PURE,
                                  pack=1)
    tl.store(y_ptr + i, v)


class FakeSm90Driver:
    """A fake of Triton's active driver for a machine without a GPU: only the target (sm_90, 32 lanes)."""

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)


def analyse(*, pure: bool) -> list[str]:
    """torch's analysis of :func:`asm_copy` (``PURE`` = ``pure``) on int32 ``x [16]``, ``y [16]`` for the fake
    sm_90: the arguments it takes as written (both when the analysis fails, after logging that failure)."""
    from torch._higher_order_ops import triton_kernel_wrap

    fn = getattr(triton_kernel_wrap, "identify_accessed_tensors", None)
    x, y = torch.zeros(16, dtype=torch.int32), torch.zeros(16, dtype=torch.int32)
    args = {"x_ptr": x, "y_ptr": y, "N": 16, "PURE": pure}
    config = triton.runtime.driver
    before = config._active  # reset_active() would create the default driver, which fails without a GPU
    config.set_active(FakeSm90Driver())
    try:
        if fn is not None:
            return sorted(dep.name for dep in fn(asm_copy, args, {}).read_writes.writes)
        return sorted(triton_kernel_wrap.identify_mutated_tensors(asm_copy, args, {}))
    finally:
        config._active = before
