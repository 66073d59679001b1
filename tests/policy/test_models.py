"""The model registry (holodesk.policy.models): every entry consistent, the one fit rule monotone, names
resolved as the ``model`` setting holds them."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from holodesk.core.fit import GIB, NEEDS_FREE_BYTES, PRECISIONS, needs_free_bytes
from holodesk.download.hub import REPO_ID
from holodesk.errors import SettingsError
from holodesk.policy.models import (
    DEFAULT_MODEL,
    MODELS,
    ModelSpec,
    describe,
    find_model,
    fit_table,
    get_model,
    models_that_fit,
    protocol_for,
    series_names,
)
from holodesk.policy.native.families import FAMILIES, families_markdown, family_of
from holodesk.policy.protocol import PROTOCOL_NAMES
from holodesk.policy.registry import get_protocol
from holodesk.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_every_entry_is_consistent() -> None:
    keys = [m.key for m in MODELS]
    assert len(set(keys)) == len(keys)
    assert len({m.hub_id.lower() for m in MODELS}) == len(MODELS)
    for m in MODELS:
        assert m.family.protocol in PROTOCOL_NAMES
        assert get_protocol(m.family.protocol).name == m.family.protocol
        assert REPO_ID.match(m.hub_id), m.hub_id
        assert m.hub_id.startswith("Hcompany/")
        assert m.parameters > 0
        assert m.active_parameters is None or 0 < m.active_parameters < m.parameters
        assert m.architecture.model_type and m.architecture.transformers_class
        assert m.family.reasoning.switch in ("system_prompt", "chat_template_kwargs")
        assert (m.family.reasoning.template_kwarg is None) == (m.family.reasoning.switch == "system_prompt")
        if m.family.image.method == "tiles":
            assert m.family.image.tile_px and m.family.image.max_tiles
        assert m.download_bytes > 0
        assert get_model(m.key) is m
        # every H Company model speaks H Company's agent contract
        assert m.family.protocol == "agent-loop-v1"


def _checkpoint_config(spec: ModelSpec) -> dict[str, object]:
    """The least of a config.json of ``spec``'s checkpoint that the load-time dispatch reads: its own
    ``model_type`` (``checkpoint_model_type`` where the registry states one, which is what the checkpoint's
    config.json says) and, for the Nemotron-H types, a language model block pattern with MoE blocks (``E``)
    exactly when the registry gives the model active parameters (mixture of experts)."""
    arch = spec.architecture
    config: dict[str, object] = {"model_type": arch.checkpoint_model_type or arch.model_type}
    if config["model_type"] in ("NemotronH_Nano_VL_V2", "nemotron_h_omni"):
        moe = spec.active_parameters is not None
        config["text_config"] = {"hybrid_override_pattern": "ME*E" if moe else "M-*-"}
    return config


@pytest.mark.parametrize("spec", MODELS, ids=[m.key for m in MODELS])
def test_every_registry_model_has_a_local_runtime(spec: ModelSpec) -> None:
    """The wizard and Settings offer every registry model that fits the GPU for local use, so each one's
    checkpoint must be dispatched by :func:`family_of` to a runtime that loads it (Holotron-12B and
    Holotron-3-Nano: the same transformers type, told apart by MoE blocks), of its kind (dense / MoE)."""
    family = family_of(_checkpoint_config(spec), spec.key)
    assert family is spec.family, (spec.key, family.key, spec.family.key)  # the entry points to its runtime's family
    assert family.runtime in ("holotron", "native")
    assert family.moe == (spec.active_parameters is not None), (spec.key, family.key)
    if family.runtime == "native":  # transformers' own class: the registry names the class of that model_type
        assert spec.architecture.model_type in family.model_types, (spec.key, family.key)
        assert spec.architecture.checkpoint_model_type is None, spec.key


def test_every_native_family_has_a_registry_model() -> None:
    """No family is declared for a model the registry does not offer."""
    offered = {family_of(_checkpoint_config(m)).key for m in MODELS}
    assert offered == {f.key for f in FAMILIES}


def test_the_docs_family_table_is_the_model_tables() -> None:
    """docs/native-families.md carries the table generated from the families and the models that point to them."""
    docs = (ROOT / "docs" / "native-families.md").read_text(encoding="utf-8")
    assert families_markdown() in docs, "docs/native-families.md is stale: paste families_markdown()'s table"
    for m in MODELS:
        assert m.display_name in families_markdown()


def test_the_model_setting_names_every_series_of_the_table() -> None:
    """The ``model`` setting's default and description (Settings' tooltip, docs/settings.md) come from the table: its
    default model's hub id and its series in order."""
    description = Settings.model_fields["model"].description or ""
    assert series_names() == ("Holotron-12B", "Holotron-3-Nano", "Holo2", "Holo3", "Holo3.1")
    assert f"H Company's models that fit this GPU: {', '.join(series_names())})" in description


def test_the_default_model_is_the_settings_default() -> None:
    assert get_model(DEFAULT_MODEL).hub_id == Settings.model_fields["model"].default
    assert find_model(Settings().model) is get_model(DEFAULT_MODEL)


def test_unknown_facts_read_unknown() -> None:
    for m in MODELS:
        facts = describe(m)
        assert facts["license"] == (m.license or "unknown")
        assert facts["base model"] == (m.base_model or "unknown")
        assert "None" not in " ".join(facts.values())
    nano = describe(get_model("holotron-3-nano"))
    assert nano["license"] == "unknown"
    assert "[not read from its config.json]" in nano["checkpoint type"]


def test_the_fit_rule_reproduces_holotron_measurements() -> None:
    """Calibration: the rule gives the needs measured for Holotron-12B (docs/benchmarks.md)."""
    holotron = get_model("holotron-12b")
    assert {p: holotron.needs_free_bytes(p) // GIB for p in PRECISIONS} == {"bf16": 28, "8bit": 18, "4bit": 12}
    assert {p: holotron.needs_free_bytes(p) for p in PRECISIONS} == NEEDS_FREE_BYTES


def test_the_fit_rule_is_monotone() -> None:
    sizes = sorted({m.parameters for m in MODELS})
    for p in PRECISIONS:
        needs = [needs_free_bytes(n, p) for n in sizes]
        assert needs == sorted(needs)  # more parameters never need less
    for n in sizes:
        needs = [needs_free_bytes(n, p) for p in PRECISIONS]
        assert needs == sorted(needs, reverse=True)  # bf16 > 8bit > 4bit
    free_steps = [g * GIB for g in range(0, 90, 2)]
    for m in MODELS:
        fitting = [{f.precision for f in m.precision_fits(free) if f.fits} for free in free_steps]
        for smaller, larger in itertools.pairwise(fitting):
            assert smaller <= larger  # more free memory never loses a precision
    with pytest.raises(ValueError):
        needs_free_bytes(10, "fp8")
    with pytest.raises(ValueError):
        needs_free_bytes(0, "bf16")


def test_models_that_fit_a_24_gb_card_and_none_without_gpu() -> None:
    free = int(23.2 * GIB)  # a 24 GB card with a desktop on it
    fits = {f.model.key: f.best for f in models_that_fit(free)}
    assert fits["holotron-12b"] == "4bit"  # 8-bit fits too but is several times slower
    assert fits["holo2-4b"] == "bf16" and fits["holo3.1-0.8b"] == "bf16"
    assert "holotron-3-nano" not in fits  # 33B: even NF4 needs 25 GiB
    assert {f.model.key: f.best for f in models_that_fit(26 * GIB)}["holotron-3-nano"] == "4bit"
    assert models_that_fit(None) == []
    table = fit_table(None)
    assert [f.model for f in table] == list(MODELS)
    assert all(f.best is None and all(p.fits is None for p in f.fits) for f in table)
    assert models_that_fit(3 * GIB) == []  # nothing fits 3 GiB


@pytest.mark.parametrize(("name", "key"), [
    ("Hcompany/Holo2-8B", "holo2-8b"),
    ("hcompany/holo2-8b", "holo2-8b"),
    ("Holo2-8B", "holo2-8b"),
    ("holo3.1-9b", "holo3.1-9b"),
    ("Hcompany/Holo-3.1-9B", "holo3.1-9b"),
    ("Holotron-12B", "holotron-12b"),
    ("/home/u/.cache/huggingface/hub/models--Hcompany--Holo3-35B-A3B/snapshots/abc123", "holo3-35b-a3b"),
    ("/data/models/Holotron-3-Nano", "holotron-3-nano"),
])
def test_find_model_resolves_the_setting(name: str, key: str) -> None:
    spec = find_model(name)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize("name", ["", "Qwen/Qwen3-VL-8B-Instruct", "/data/models/my-checkpoint", "gpt-4o"])
def test_find_model_knows_only_registry_models(name: str) -> None:
    assert find_model(name) is None


def test_protocol_for_auto_override_and_bad_names() -> None:
    assert protocol_for("Hcompany/Holo2-8B") == "agent-loop-v1"
    assert protocol_for("Hcompany/Holo2-8B", "holo-v1") == "holo-v1"
    assert protocol_for("unknown-model") == "agent-loop-v1"
    with pytest.raises(SettingsError, match="unknown action protocol"):
        protocol_for("Hcompany/Holo2-8B", "holo-v2")
    with pytest.raises(SettingsError, match="unknown model"):
        get_model("holo9")


def test_registry_module_stays_pure() -> None:
    """models.py is data: it imports neither torch nor transformers nor Qt (checked on its source)."""
    tree = ast.parse((ROOT / "app/holodesk/policy/models.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"torch", "transformers", "PySide6"}


def test_every_profile_cites_a_source_for_each_point() -> None:
    from holodesk.policy.models import Profile

    points = [f for f in Profile.__dataclass_fields__ if f != "sources"]
    for m in MODELS:
        sources = dict(m.family.profile.sources)
        assert sorted(sources) == sorted(points), m.key
        assert all(text.strip() for text in sources.values()), m.key
        profile = m.family.profile
        assert 0 < profile.top_p <= 1 and profile.temperature > 0 and profile.think_budget > 0


def test_profiles_follow_the_makers_where_published() -> None:
    """hub.hcompany.ai/agent-loop (Holo3.x: reasoning on, effort medium, 3 screenshots), NVIDIA's holo-nano loop
    (Holotron-3-Nano: thinking, medium, 0.8 / 0.95, 4,096 tokens, 3 images), hai-cookbook (Holo2 thinks by
    default); Holotron-12B: nothing published, Holodesk's choice is reasoning off."""
    for m in MODELS:
        p = m.family.profile
        if m.series in ("Holo3", "Holo3.1"):
            assert (p.reasoning, p.reasoning_effort, p.max_images) == (True, "medium", 3), m.key
        if m.series == "Holo2":
            assert p.reasoning is True and m.family.reasoning.template_kwarg == "thinking", m.key
    nano = get_model("holotron-3-nano").family.profile
    assert (nano.reasoning, nano.reasoning_effort, nano.temperature, nano.top_p, nano.max_images) == (
        True, "medium", 0.8, 0.95, 3)
    assert nano.think_budget + 1024 == 4096  # the published max_tokens, with Holodesk's 1,024 reply tokens
    assert get_model("holotron-12b").family.profile.reasoning is False


def test_run_choice_takes_the_profile_where_the_user_left_auto() -> None:
    from holodesk.policy.models import UNKNOWN_PROFILE, run_choice

    auto = run_choice("Hcompany/Holo3-35B-A3B", seed=5)
    assert (auto.reasoning, auto.reasoning_effort, auto.think_budget) == (True, "medium", 2048)
    assert (auto.sampling.greedy, auto.sampling.temperature, auto.sampling.top_p, auto.sampling.seed) == (
        False, 0.8, 1.0, 5)
    off = run_choice("Hcompany/Holo3-35B-A3B", reasoning="off", greedy=True, temperature=0.3, top_p=0.5)
    assert (off.reasoning, off.reasoning_effort, off.sampling.greedy) == (False, None, True)
    assert (off.sampling.temperature, off.sampling.top_p) == (0.3, 0.5)
    unknown = run_choice("my-served-model", reasoning="auto")
    assert unknown.profile is UNKNOWN_PROFILE and not unknown.known and unknown.reasoning is False
    assert any("not in Holodesk's model registry" in n for n in unknown.notes)
    seeds = {run_choice("holo2-8b").sampling.seed for _ in range(4)}
    assert len(seeds) > 1  # unset: a new seed each time (recorded with every proposal)


def test_bad_generation_settings_are_refused_with_what_to_do() -> None:
    from holodesk.policy.models import Sampling, run_choice

    with pytest.raises(SettingsError, match="reasoning must be"):
        run_choice("holo2-8b", reasoning="maybe")
    with pytest.raises(SettingsError, match="temperature must be above 0") as caught:
        Sampling(greedy=False, temperature=0.0, top_p=1.0, seed=0)
    assert "greedy" in (caught.value.hint or "")
    with pytest.raises(SettingsError, match="top_p"):
        Sampling(greedy=False, temperature=1.0, top_p=0.0, seed=0)
    assert Sampling(greedy=False, temperature=1.0, top_p=1.0, seed=2**31 - 1).step_seed(1) == 0


def test_old_settings_files_true_false_reasoning_still_load() -> None:
    assert Settings(reasoning=True).reasoning == "on"  # type: ignore[arg-type]
    assert Settings(reasoning=False).reasoning == "off"  # type: ignore[arg-type]
    assert Settings().reasoning == "auto"
