"""The policy options that ``holodesk run`` and ``holodesk eval`` share, declared once: which policy
(``--script``, ``--model``, ``--endpoint``, ``--precision``) and how it generates (``--think``, ``--greedy``,
``--seed``). Only argparse is imported here (the CLI's start-up stays light); :func:`policy_overrides` gives
the settings fields (:class:`holodesk.settings.Settings`) the parsed values set.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from holodesk.errors import SettingsError


def add_policy_options(parser: argparse.ArgumentParser, *, models: Sequence[str]) -> None:
    """Declare the policy options shared by ``holodesk run`` and ``holodesk eval`` on ``parser``: which policy
    (``--script``, ``--model``, ``--endpoint``, ``--precision``) and how it generates (``--think``, ``--greedy``,
    ``--seed``); ``models`` names the model series ``--model`` runs (``holodesk.policy.models.series_names``).
    :func:`policy_overrides` maps the parsed values onto settings."""
    parser.add_argument("--script", type=Path, help="replay a file of protocol replies (JSON Lines), one per step")
    parser.add_argument("--model", help="a Hugging Face repo id or local checkpoint folder of one of H Company's "
                        f"models ({', '.join(models)}: every family is run; e.g. Hcompany/Holo2-8B); with "
                        "--endpoint, the model name the server serves")
    parser.add_argument("--endpoint", help="OpenAI-compatible server URL (vLLM), e.g. http://host:8000/v1")
    parser.add_argument("--precision", choices=["bf16", "8bit", "4bit"], help="local model weights")
    parser.add_argument("--think", choices=["auto", "on", "off"],
                        help="think before acting: auto follows the model's profile (docs/model-fidelity.md), on is "
                             "recommended where the makers say so, off is faster (a typical thought adds seconds a "
                             "step: the run's first line and `holodesk doctor` say how many on this GPU)")
    parser.add_argument("--greedy", action="store_true", default=None, help="greedy decoding instead of sampling")
    parser.add_argument("--seed", type=int, help="sampling seed (recorded in the episode; default: a new one)")


def policy_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings overrides (for :func:`load_settings`) of the options :func:`add_policy_options` declared;
    None where an option was not given. ``policy`` is "script", "remote" or "local" by the options given.

    Raises:
        SettingsError: ``--script`` combined with ``--model`` or ``--endpoint``.
    """
    if args.script and (args.model or args.endpoint):
        raise SettingsError("--script replays a file; it cannot be combined with --model or --endpoint")
    policy = "script" if args.script else "remote" if args.endpoint else "local" if args.model else None
    return {"policy": policy, "model": args.model, "endpoint": args.endpoint, "script_file": args.script,
            "precision": args.precision, "reasoning": args.think, "greedy": args.greedy, "seed": args.seed}

