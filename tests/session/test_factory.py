"""The session builder: the policy is built from the declared policy settings only, and its cache key
changes with each of them (a setting the policy reads but the key leaves out would keep a stale model).

The local and remote backends are replaced by recording FAKES here (no GPU, no server): the tests are
about which settings reach them, not what they do.
"""

from __future__ import annotations

import sys
import threading
import types
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.core.geometry import Monitor
from holodesk.errors import SettingsError
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.factory import PolicyCache, build_policy, build_session, policy_key
from holodesk.settings import Settings, policy_fields


class _ReadRecorder:
    """Stands in for Settings and records every setting that is read from it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self.settings, name)


class _FakeBackend:
    """A FAKE policy backend (local or remote) that keeps what it was built with."""

    name = "fake backend"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    @classmethod
    def load(cls, *args: Any, **kwargs: Any) -> _FakeBackend:
        return cls(*args, **kwargs)

    def close(self) -> None:
        pass


@pytest.fixture
def fake_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    import holodesk.policy.remote
    import holodesk.secrets

    local = types.ModuleType("holodesk.policy.local")  # the local runtimes' one entry (it dispatches by family)
    local.load_local_policy = _FakeBackend.load  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "holodesk.policy.local", local)
    monkeypatch.setattr(holodesk.policy.remote, "RemotePolicy", _FakeBackend)
    monkeypatch.setattr(holodesk.secrets, "resolve_api_key", lambda endpoint: ("", "none (fake)"))


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "replay.jsonl"
    path.write_text('{"note": null, "thought": "done", "tool_call": {"tool_name": "answer", "text": "ok"}}\n')
    return path


@pytest.mark.usefixtures("fake_backends")
@pytest.mark.parametrize("kind", ["local", "remote", "script"])
def test_build_policy_reads_only_the_declared_policy_settings(kind: str, tmp_path: Path) -> None:
    """Every setting build_policy reads is declared a policy setting, so it is part of the cache key."""
    settings = Settings(data_dir=tmp_path, policy=kind, endpoint="http://gpu-box:8000/v1",
                        script_file=_script(tmp_path), decoder="stock", max_reply_tokens=99)
    recorder = _ReadRecorder(settings)
    policy = build_policy(recorder, cancel=threading.Event())  # type: ignore[arg-type]
    policy.close()
    assert recorder.read, "build_policy read no setting at all"
    undeclared = recorder.read - set(policy_fields())
    assert not undeclared, f"build_policy reads settings that are not declared policy settings: {undeclared}"
    if kind == "local":  # the settings the tray's old key left out reach the model
        assert isinstance(policy, _FakeBackend)
        assert policy.kwargs["decoder"] == "stock" and policy.args[1].max_reply_tokens == 99
    if kind == "remote":  # the same generation options, under the settings' own names
        assert isinstance(policy, _FakeBackend)
        assert policy.kwargs["options"].max_reply_tokens == 99


@pytest.mark.parametrize("kind", ["local", "remote"])
def test_the_model_is_looked_up_once_per_policy_build(kind: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """One trip from the settings to a policy looks the model up in the registry once (the generation options
    carry what the policy needs of it): every module's ``find_model`` is replaced by a counting one. The local
    backend is the recording FAKE (the load dispatches by the checkpoint's config.json, not by the registry); the
    remote policy is the real one (building it sends nothing)."""
    import holodesk.policy.local
    import holodesk.policy.models
    import holodesk.policy.remote
    import holodesk.secrets

    real = holodesk.policy.models.find_model
    looked_up: list[str] = []

    def counting(name: str) -> Any:
        looked_up.append(name)
        return real(name)

    for module in [m for name, m in sys.modules.items() if name.startswith("holodesk.")]:
        if getattr(module, "find_model", None) is real:
            monkeypatch.setattr(module, "find_model", counting)
    monkeypatch.setattr(holodesk.policy.local, "load_local_policy", _FakeBackend.load)
    monkeypatch.setattr(holodesk.secrets, "resolve_api_key", lambda endpoint: ("", "none (fake)"))
    settings = Settings(data_dir=tmp_path, policy=kind, endpoint="http://127.0.0.1:9/v1", model="holo2-8b")
    policy = build_policy(settings)
    try:
        assert looked_up == ["holo2-8b"]
        if kind == "remote":  # what the one look-up gave reaches the request: Holo2's template switch
            assert isinstance(policy, holodesk.policy.remote.RemotePolicy)
            assert policy.chat_template_kwargs == {"thinking": True} and policy.protocol.name == "agent-loop-v1"
    finally:
        policy.close()


def _other_value(name: str, settings: Settings, tmp_path: Path) -> Any:
    """A valid value for setting ``name`` other than its value in ``settings``, derived from its type."""
    value = getattr(settings, name)
    annotation = Settings.model_fields[name].annotation
    options = typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()
    if options:
        return next(o for o in options if o != value)
    if isinstance(value, bool):
        return not value
    if name == "endpoint":
        return "http://other-host:8000/v1"
    if Path in typing.get_args(annotation) or annotation is Path:
        return tmp_path / "other.jsonl"
    if isinstance(value, float) or float in typing.get_args(annotation):
        return 0.5 if value != 0.5 else 0.7
    if isinstance(value, int) or int in typing.get_args(annotation):
        return (value or 100) + 1
    if isinstance(value, float):
        return value + 1.0
    if isinstance(value, str):
        return value + "-other"
    raise AssertionError(f"no other value known for the policy setting {name!r} ({annotation}); teach this test")


def test_every_policy_setting_is_part_of_the_key(tmp_path: Path) -> None:
    base = Settings(data_dir=tmp_path)
    assert {"decoder", "max_reply_tokens", "max_string_chars", "model", "policy"} <= set(policy_fields())
    for name in policy_fields():
        changed = base.model_copy(update={name: _other_value(name, base, tmp_path)})
        assert policy_key(changed) != policy_key(base), f"changing {name} keeps the policy"


def test_settings_the_policy_does_not_read_keep_the_key(tmp_path: Path) -> None:
    base = Settings(data_dir=tmp_path)
    for update in ({"approval": "auto"}, {"max_steps": 7}, {"monitor": 2}, {"typing": "clipboard"}):
        assert policy_key(base.model_copy(update=update)) == policy_key(base)


class _CountingPolicy:
    """A FAKE policy that counts how often it was closed."""

    name = "counting (fake)"

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_policy_cache_rebuilds_when_the_key_changes(tmp_path: Path) -> None:
    cache = PolicyCache()
    built: list[_CountingPolicy] = []

    def build(settings: Settings) -> Any:
        built.append(_CountingPolicy())
        return built[-1]

    base = Settings(data_dir=tmp_path)
    first = cache.get(base, build)
    assert cache.get(base.model_copy(update={"approval": "auto"}), build) is first and len(built) == 1
    second = cache.get(base.model_copy(update={"decoder": "stock"}), build)
    assert second is not first and first.closed == 1 and len(built) == 2
    replay = base.model_copy(update={"policy": "script", "script_file": _script(tmp_path)})
    assert cache.get(replay, build) is not cache.get(replay, build)  # a replay is read again every task
    cache.close()
    assert built[-1].closed == 1 and cache.policy is None


def _refuse(request: ApprovalRequest) -> ApprovalResponse:
    return ApprovalResponse(Decision.STOP)


def test_build_session_assembles_the_parts_from_one_settings(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, policy="script", script_file=_script(tmp_path), monitor=2,
                        max_steps=7, max_wall_s=60, max_repeats=4)
    monitors = [Monitor(1, 0, 0, 640, 400), Monitor(2, 640, 0, 320, 200, name="Side")]
    capture = FakeCapture({2: [np.zeros((200, 320, 3), np.uint8)]}, monitors=monitors)
    executor = RecordingExecutor()
    stop = threading.Event()
    seen: list[Any] = []

    def approval(policy: Any) -> ApprovalPolicy:
        seen.append(policy)
        return ApprovalPolicy(settings.approval, _refuse)

    session = build_session(settings, approval, capture=lambda s: capture, executor=lambda s, ev: executor,
                            stop_event=stop, meta={"ui": "test"})
    assert session.capture is capture and session.executor is executor and seen == [session.policy]
    assert (session.limits.max_steps, session.limits.max_wall_s, session.limits.max_repeats,
            session.limits.monitor) == (7, 60, 4, 2)
    assert session.episodes_dir == settings.episodes_dir
    assert session.meta == {"monitor_label": monitors[1].label, "ui": "test"}
    session.request_stop()
    assert stop.is_set()  # the task's stop event is the session's
    stopped = session.run("answer")  # a stop asked before the run (a queued task) ends that run
    assert (stopped.status.value, stopped.steps) == ("stopped", 0) and not stop.is_set()
    result = session.run("answer")  # the stop belonged to that run
    assert (result.status.value, result.answer) == ("finished", "ok")


def test_build_session_refuses_a_monitor_the_display_lacks(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, policy="script", script_file=_script(tmp_path), monitor=3)
    capture = FakeCapture([np.zeros((200, 320, 3), np.uint8)])
    with pytest.raises(SettingsError, match="monitor 3 does not exist") as info:
        build_session(settings, ApprovalPolicy("step", _refuse), capture=lambda s: capture,
                      executor=lambda s, ev: RecordingExecutor())
    assert "holodesk doctor" in info.value.hint
