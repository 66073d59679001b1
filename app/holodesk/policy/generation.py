"""How a policy generates its replies, as one object: :class:`GenerationOptions`.

Built once per trip from the settings (:meth:`GenerationOptions.from_settings`) or from a model name and the
same choices (:meth:`GenerationOptions.for_model`), each with one look-up of the model registry
(:func:`holodesk.policy.models.find_model`), and passed unchanged to every policy (Holotron, native, remote):
the names are the settings' own (``constrained_decoding``, ``max_reply_tokens``, ...).

Pure data (no torch, no transformers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from holodesk.errors import PolicyError
from holodesk.policy.models import (
    AUTO_PROTOCOL,
    GREEDY,
    Reasoning,
    Sampling,
    find_model,
    protocol_of,
    run_choice_for,
)
from holodesk.policy.protocol import DEFAULT_PROTOCOL

if TYPE_CHECKING:
    from holodesk.settings import Settings


@dataclass(frozen=True)
class GenerationOptions:
    """Everything that decides how a policy's replies are generated (the policy-building settings less the
    backend's own: endpoint, checkpoint, precision, decoder).

    Attributes:
        protocol: the action protocol's name (resolved: never ``"auto"``).
        max_images: screenshots in the prompt as images, the current one included (>= 1).
        constrained_decoding: constrain replies to the protocol's JSON schema (local: xgrammar; remote: the
            request's ``response_format``).
        max_reply_tokens: most tokens of one reply after any thinking (>= 1).
        max_string_chars: local, constrained: every JSON string of a reply capped at this many characters;
            None: the protocol's own limits.
        reasoning: think before acting.
        reasoning_effort: sent by the remote policy with reasoning on; None: none.
        think_budget: most tokens of thought, after which ``</think>`` is forced.
        sampling: how each token is chosen (:class:`~holodesk.policy.models.Sampling`).
        jump_forward: Holotron's static decoder feeds the tokens the grammar forces in one model pass.
        reasoning_switch: how the model's reasoning is switched, from its registry entry; None: the model is not
            in the registry (a ``/think`` or ``/no_think`` line, Nemotron Nano 2's switch). The remote policy
            follows it; a local native checkpoint follows its family's.
        notes: what came from where, in words (:class:`~holodesk.policy.models.RunChoice`'s notes).
    Raises:
        PolicyError: ``max_images`` or ``max_reply_tokens`` below 1.
    """

    protocol: str = DEFAULT_PROTOCOL
    max_images: int = 3
    constrained_decoding: bool = True
    max_reply_tokens: int = 1024
    max_string_chars: int | None = None
    reasoning: bool = False
    reasoning_effort: str | None = None
    think_budget: int = 1024
    sampling: Sampling = GREEDY
    jump_forward: bool = True
    reasoning_switch: Reasoning | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_images < 1:
            raise PolicyError(f"max_images must be at least 1 (the current screenshot), got {self.max_images}")
        if self.max_reply_tokens < 1:
            raise PolicyError(f"max_reply_tokens must be at least 1, got {self.max_reply_tokens}")

    @property
    def token_budget(self) -> int:
        """Most tokens one reply may take: :attr:`max_reply_tokens` plus :attr:`think_budget` with reasoning on
        (what a server is asked for as ``max_tokens``, and what a local decoder reserves)."""
        return self.max_reply_tokens + (self.think_budget if self.reasoning else 0)

    def step_record(self, step: int) -> dict[str, object]:
        """What every proposal of episode step ``step`` (0-based) records about its generation:
        ``constrained``, ``reasoning``, ``sampling`` (:meth:`Sampling.record`) and ``step_seed``."""
        return {"constrained": self.constrained_decoding, "reasoning": self.reasoning,
                "sampling": self.sampling.record(), "step_seed": self.sampling.step_seed(step)}

    @classmethod
    def for_model(cls, model: str, *, protocol: str = AUTO_PROTOCOL, reasoning: str = "auto", greedy: bool = False,
                  temperature: float | None = None, top_p: float | None = None, seed: int | None = None,
                  max_images: int = 3, constrained_decoding: bool = True, max_reply_tokens: int = 1024,
                  max_string_chars: int | None = None, jump_forward: bool = True) -> GenerationOptions:
        """The options for ``model`` (hub id, key, served name or folder): its registry entry looked up once,
        its profile where a choice is ``"auto"`` / None (:func:`~holodesk.policy.models.run_choice_for`) and its
        protocol where ``protocol`` is ``"auto"`` (:func:`~holodesk.policy.models.protocol_of`).

        Raises:
            SettingsError: an unknown protocol or reasoning word, or sampling values out of range.
            PolicyError: ``max_images`` or ``max_reply_tokens`` below 1.
        """
        spec = find_model(model)
        choice = run_choice_for(model, spec, reasoning=reasoning, greedy=greedy, temperature=temperature,
                                top_p=top_p, seed=seed)
        return cls(protocol=protocol_of(spec, protocol), max_images=max_images,
                   constrained_decoding=constrained_decoding, max_reply_tokens=max_reply_tokens,
                   max_string_chars=max_string_chars, reasoning=choice.reasoning,
                   reasoning_effort=choice.reasoning_effort, think_budget=choice.think_budget,
                   sampling=choice.sampling, jump_forward=jump_forward,
                   reasoning_switch=spec.family.reasoning if spec is not None else None, notes=choice.notes)

    @classmethod
    def from_settings(cls, settings: Settings) -> GenerationOptions:
        """:meth:`for_model` with the settings' ``model`` and generation settings.

        Raises:
            SettingsError, PolicyError: as :meth:`for_model`.
        """
        return cls.for_model(settings.model, protocol=settings.protocol, reasoning=settings.reasoning,
                             greedy=settings.greedy, temperature=settings.temperature, top_p=settings.top_p,
                             seed=settings.seed, max_images=settings.max_images,
                             constrained_decoding=settings.constrained_decoding,
                             max_reply_tokens=settings.max_reply_tokens, max_string_chars=settings.max_string_chars)


__all__ = ["GenerationOptions"]
