"""The decoder state of a NemotronH language model, allocated once: KV cache, conv and SSM state.

Every tensor the static decoder (:mod:`.decoder`) reads or writes between tokens lives here, at a fixed
address, so a decode step is a fixed sequence of kernels that a CUDA graph can capture. Shapes (``B`` batch,
``L`` = :attr:`DecoderState.max_len`):

* attention layer ``i``: ``k[i]``, ``v[i]`` ``[B, kv_heads, L, head_dim]`` in the model dtype; token ``t``
  lives at index ``t`` (NemotronH has no positional encoding, so a cached entry never changes);
* Mamba-2 layer ``i``: ``conv[i]`` ``[B, conv_dim, conv_kernel]`` in the model dtype (the last
  ``conv_kernel`` inputs of the depthwise causal conv) and ``ssm[i]`` ``[B, heads, head_dim, state]``
  float32 (the dtype transformers' cache keeps after a chunked scan);
* ``pos`` ``[1]`` int64 on the device: tokens in the state (the next token's index), mirrored on the
  host by :attr:`DecoderState.length` so that choosing a graph never needs a device sync;
* ``keys``: one int per prompt token identifying its content (see :meth:`DecoderState.resume_point`),
  and snapshots of the Mamba state at chosen prompt positions in preallocated slots.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from transformers import NemotronHForCausalLM

MAMBA, ATTENTION, MLP = "linear_attention", "full_attention", "mlp"
"""Block kinds as NemotronH names them (``NemotronHBlock.block_type``: Mamba-2, attention, MLP)."""


class Embeddings(Protocol):
    """What the prefill reads its input from: a ``[B, T, H]`` tensor, or an object read the same way that
    builds each chunk when asked (:class:`holodesk.policy.holotron.runtime.PromptEmbeddings`)."""

    @property
    def shape(self) -> Sequence[int]: ...

    def __getitem__(self, index: tuple[slice, slice], /) -> torch.Tensor: ...


@dataclasses.dataclass
class PrefillReport:
    """What one ``StaticDecoder.prefill`` did to the state: prompt ``tokens``, ``reused`` from the previous
    state (the resume point), ``computed`` (``tokens - reused``), ``chunks`` run, ``snapshots`` saved."""

    tokens: int
    reused: int
    computed: int
    chunks: int
    snapshots: list[int] = dataclasses.field(default_factory=list)


class DecoderState:
    """Preallocated decoder state of one ``NemotronHForCausalLM`` (see the module docstring).

    Args:
        lm: transformers' ``NemotronHForCausalLM`` (its config and mixers give the shapes).
        max_len: tokens the attention cache must hold (prompt + reply); rounded up to ``bucket``.
        bucket: attention-window granularity of decode in tokens (:meth:`window`).
        snapshot_slots: Mamba-state snapshots kept for resuming the next prompt (each the size of all
            conv + SSM state: ``28 x 5.3 MiB`` for Holotron-12B), so memory between steps is constant.
        batch: batch size B.
    Raises:
        ValueError: a block type other than Mamba-2, attention and MLP; ``snapshot_slots < 0``.
    """

    def __init__(self, lm: NemotronHForCausalLM, *, max_len: int, bucket: int, snapshot_slots: int = 1,
                 batch: int = 1) -> None:
        import torch  # lazy: torch (optional, heavy)

        if snapshot_slots < 0:
            raise ValueError(f"snapshot_slots must be >= 0, got {snapshot_slots}")
        cfg: Any = lm.config
        layers: list[Any] = list(lm.model.layers)
        self.kinds: list[str] = [layer.block_type for layer in layers]
        emb = lm.model.embeddings.weight
        dev, dt = emb.device, emb.dtype
        self.bucket = bucket
        self.max_len = int(math.ceil(max_len / bucket) * bucket)
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.conv: dict[int, torch.Tensor] = {}
        self.ssm: dict[int, torch.Tensor] = {}
        for i, (layer, kind) in enumerate(zip(layers, self.kinds, strict=True)):
            mixer = layer.mixer
            if kind == ATTENTION:
                shape = (batch, cfg.num_key_value_heads, self.max_len, mixer.head_dim)
                self.k[i] = torch.zeros(shape, dtype=dt, device=dev)
                self.v[i] = torch.zeros(shape, dtype=dt, device=dev)
            elif kind == MAMBA:
                self.conv[i] = torch.zeros(batch, mixer.conv_dim, mixer.conv_kernel_size, dtype=dt, device=dev)
                self.ssm[i] = torch.zeros(batch, mixer.num_heads, mixer.head_dim, mixer.ssm_state_size,
                                          dtype=torch.float32, device=dev)
            elif kind != MLP:
                raise ValueError(f"block type {kind!r} is not supported by the static decoder")
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.length = 0
        self.keys: list[int] = []
        self.snapshots: dict[int, int] = {}  # prompt position -> slot index
        self._slots = [[(torch.zeros_like(self.conv[i]), torch.zeros_like(self.ssm[i])) for i in self.conv]
                       for _ in range(snapshot_slots)]

    @property
    def snapshot_slots(self) -> int:
        """Number of preallocated snapshot slots."""
        return len(self._slots)

    def reset(self) -> None:
        """Forget the prompt: conv/SSM state zeroed, length 0, no keys, no snapshots (KV entries are
        overwritten before they are read again)."""
        for t in (*self.conv.values(), *self.ssm.values()):
            t.zero_()
        self.pos.zero_()
        self.length = 0
        self.keys = []
        self.snapshots = {}

    def clear(self) -> None:
        """:meth:`reset`, and every KV entry and snapshot slot zeroed too (the state after a pass whose values
        must not be read again, even as masked entries of a window: a non-finite value there times its zero
        attention weight is NaN)."""
        for t in (*self.k.values(), *self.v.values(), *(t for slot in self._slots for pair in slot for t in pair)):
            t.zero_()
        self.reset()

    def snapshot(self, position: int, keep: Collection[int] = ()) -> None:
        """Copy the current Mamba state into a slot as the state after ``position`` prompt tokens: a free
        slot, else the slot of the oldest position not in ``keep``, else of the oldest position (nothing
        when there are no slots)."""
        if not self._slots:
            return
        used = set(self.snapshots.values())
        free = [s for s in range(len(self._slots)) if s not in used]
        if free:
            slot = free[0]
        else:
            spare = [p for p in self.snapshots if p not in keep]
            slot = self.snapshots.pop(min(spare or self.snapshots))
        for i, (conv, ssm) in zip(self.conv, self._slots[slot], strict=True):
            conv.copy_(self.conv[i])
            ssm.copy_(self.ssm[i])
        self.snapshots[position] = slot

    def restore(self, position: int) -> None:
        """Set the Mamba state to the snapshot taken at ``position`` and drop the snapshots after it;
        ``position`` 0 is the empty prompt (:meth:`reset`). ``length``/``pos``/``keys`` are left to the
        caller (the prefill that continues from here sets them).

        Raises:
            KeyError: no snapshot at ``position``.
        """
        if position == 0:
            self.reset()
            return
        slot = self.snapshots[position]
        for i, (conv, ssm) in zip(self.conv, self._slots[slot], strict=True):
            self.conv[i].copy_(conv)
            self.ssm[i].copy_(ssm)
        self.snapshots = {p: s for p, s in self.snapshots.items() if p <= position}

    def resume_point(self, keys: Sequence[int]) -> int:
        """Prompt tokens with these ``keys`` that can be taken from the state: the latest snapshot
        position inside the common prefix of ``keys`` and the previous prompt's keys, and short of the
        whole prompt (its last token must run to give logits); 0 when there is none."""
        lcp = 0
        for a, b in zip(self.keys, keys, strict=False):
            if a != int(b):
                break
            lcp += 1
        usable = [p for p in self.snapshots if p <= lcp and p < len(keys)]
        return max(usable, default=0)

    def window(self, length: int) -> int:
        """Attention window (keys read, a multiple of ``bucket``) of a decode step with ``length`` tokens
        in the state.

        Raises:
            ValueError: ``length + 1`` tokens exceed :attr:`max_len`.
        """
        w = int(math.ceil((length + 1) / self.bucket) * self.bucket)
        if w > self.max_len:
            raise ValueError(f"{length + 1} tokens exceed the static cache of {self.max_len}")
        return w

    def snapshot_bytes(self) -> int:
        """Bytes of the snapshot slots (:attr:`snapshot_slots` x every layer's conv + SSM state), held whether
        or not a slot is in use."""
        return int(sum(t.numel() * t.element_size() for slot in self._slots for pair in slot for t in pair))

    def nbytes(self) -> int:
        """Bytes held by the state: KV cache, conv/SSM state and the snapshot slots."""
        tensors = [*self.k.values(), *self.v.values(), *self.conv.values(), *self.ssm.values(), self.pos]
        tensors += [t for slot in self._slots for pair in slot for t in pair]
        return int(sum(t.numel() * t.element_size() for t in tensors))


__all__ = ["ATTENTION", "MAMBA", "MLP", "DecoderState", "Embeddings", "PrefillReport"]
