"""``holodesk mcp``: Holodesk as a sub-agent of another agent, through the Model Context Protocol.

Built on the official ``mcp`` SDK (:class:`mcp.server.mcpserver.MCPServer`), over stdio or over the
SDK's streamable HTTP transport on loopback with a bearer token. Tools:

* ``run_task(task, mode?)`` runs one task in the user's session and returns its outcome (status
  finished / answered / stopped / failed / busy, reason, answer, steps, episode id, one plain-words report
  per step); each step is also sent as a progress notification while the task runs.
* ``get_status()``, ``list_episodes()``; resources ``holodesk://episodes/{episode_id}`` (the JSONL
  record) and ``holodesk://episodes/{episode_id}/{frame}`` (a screenshot, only when the user allowed it in
  Settings: ``mcp_share_screenshots``).

The user stays in charge: a caller's task is approved exactly like a task typed in the command box
(the approval overlay, the autopilot's countdown for low-risk steps when the user allowed ``auto`` in
``mcp_allowed_modes``). When the desktop app runs, tasks are handed to it over the single-instance
channel (:mod:`holodesk.instance`); when it does not, this process hosts a headless app
(:func:`holodesk.ui.host.host_tasks`). Only one task drives the desktop at a time: a second call gets
a ``busy`` outcome. A cancelled call, a client that disconnects and a host that exits stop the task
before its next action; the episode records ``stopped_by``: over stdio, "the MCP client (it cancelled the
call)" or "the MCP client (it went away: disconnected)" (:func:`who_stopped`).
"""

import asyncio
import contextlib
import hmac
import json
import logging
import os
import re
import secrets
import select
import shlex
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError

from holodesk import __version__, instance
from holodesk.core.approval import ApprovalMode
from holodesk.errors import DisplayError, HolodeskError, SecretStoreError, SettingsError
from holodesk.secrets import load_api_key, store_api_key
from holodesk.session.episode import EPISODE_FILE
from holodesk.settings import Settings, load_settings

log = logging.getLogger(__name__)

CALLER = "the MCP client"
"""Who a caller's stop is attributed to in the episode record (when the cause cannot be told: HTTP)."""
CANCELLED_BY = f"{CALLER} (it cancelled the call)"
"""``stopped_by`` of a stdio call the client cancelled (``notifications/cancelled``) while connected."""
GONE_BY = f"{CALLER} (it went away: disconnected)"
"""``stopped_by`` of a stdio call whose client closed the server's stdin (it exited or disconnected)."""

_client_input = -1
"""A copy of the stdio server's stdin (the client's end of the wire) while it serves, else -1."""


def who_stopped() -> str:
    """Who stopped a caller's task whose call was cancelled: :data:`GONE_BY` when the stdio client's end of
    the wire has hung up (the SDK cancels every call at its end of file), :data:`CANCELLED_BY` while it is
    still connected (the SDK cancels a call on the client's ``notifications/cancelled``), :data:`CALLER`
    when not serving stdio (HTTP: the cause is not known here)."""
    if _client_input < 0:
        return CALLER
    hangup = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)
    poller = select.poll()
    poller.register(_client_input, hangup)
    return GONE_BY if any(events & hangup for _fd, events in poller.poll(0)) else CANCELLED_BY

HOSTS = ("claude-code", "cursor", "codex")
"""Clients ``--print-config`` knows."""

TOKEN_ENV = "HOLODESK_MCP_TOKEN"
"""Environment variable that gives the HTTP transport's bearer token (else it is kept in the keychain)."""

HEARTBEAT_S = 5.0
"""Seconds without a step report after which ``run_task`` sends a progress notification anyway (a step
waiting for the user's approval can take minutes): the host sees the call is alive."""

_EPISODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
_FRAME = re.compile(r"^step-\d{3,6}\.png$")

OnStep = Callable[[dict[str, Any]], None]
LocalRunner = Callable[[str, str | None, Callable[[], str], OnStep, threading.Event], dict[str, Any]]
"""``AppRemote.run_task`` of the in-process host: (task, mode, by, on_step, cancel) -> reply."""


def busy_outcome(reason: str) -> dict[str, Any]:
    """The outcome of a call refused because another task drives the desktop."""
    return {"status": "busy", "reason": reason, "answer": None, "steps": 0, "episode_id": None, "step_reports": []}


def step_message(report: dict[str, Any]) -> str:
    """One progress line: ``"Step 2: Click at (10, 20) — approved by the user — performed"``."""
    return f"Step {report['step']}: {report['action']} — {report['decision']} — {report['result']}"


def heartbeat_message(steps_done: int) -> str:
    """The progress line sent every :data:`HEARTBEAT_S` seconds while no step ends."""
    return (f"Step {steps_done + 1} in progress: it may be waiting for the user's approval on their screen "
            "(the task goes on when they decide)")


class Desk:
    """Where a caller's task runs: the desktop app over the channel when it runs, else ``local``.

    Args:
        local: the in-process host's task runner, or None (then the app must run).
        local_status: the in-process host's status (``AppRemote.status``), or None.
        env: environment naming the desktop (default ``os.environ``).
        unavailable: why this process cannot host tasks (no desktop in its environment), told to each caller
            when no app runs; None when it can (or ``local`` is None for another reason).
    """

    def __init__(self, local: LocalRunner | None, local_status: Callable[[], dict[str, Any]] | None = None,
                 env: dict[str, str] | None = None, unavailable: HolodeskError | None = None) -> None:
        self.local = local
        self.local_status = local_status
        self.env = env
        self.unavailable = unavailable
        self._busy = threading.Lock()

    def app_runs(self) -> bool:
        return instance.app_running(self.env)

    def run_task(self, task: str, mode: str | None, on_step: OnStep, cancel: threading.Event,
                 by: Callable[[], str]) -> dict[str, Any]:
        """Run ``task`` to its end (blocking); returns the outcome dict.

        Args:
            by: called when ``cancel`` is set, says who stopped the task.
        """
        if not self._busy.acquire(blocking=False):
            return busy_outcome("busy: this MCP server is already running a task; one task drives the desktop "
                                "at a time")
        try:
            if self.app_runs():
                reply = self._run_in_app(task, mode, on_step, cancel, by)
            elif self.local is not None:
                reply = self._run_local(task, mode, on_step, cancel, by)
            elif self.unavailable is not None:
                raise self.unavailable
            else:
                raise instance.NotRunning("Holodesk is not running on this desktop", hint="Start it with `holodesk`.")
        finally:
            self._busy.release()
        if reply.get("ok"):
            return dict(reply["outcome"])
        if reply.get("busy"):
            return busy_outcome(str(reply.get("error")))
        raise HolodeskError(str(reply.get("error") or "the task could not start"))

    def _run_local(self, task: str, mode: str | None, on_step: OnStep, cancel: threading.Event,
                   by: Callable[[], str]) -> dict[str, Any]:
        assert self.local is not None
        return self.local(task, mode, by, on_step, cancel)

    def _run_in_app(self, task: str, mode: str | None, on_step: OnStep, cancel: threading.Event,
                    by: Callable[[], str]) -> dict[str, Any]:
        conn = instance.connect(env=self.env)
        finished = threading.Event()

        def watch() -> None:  # a cancellation asks the app to stop the task, naming who stopped it
            while not finished.is_set():
                if cancel.wait(0.05):
                    with contextlib.suppress(OSError):
                        conn.send({"command": "stop", "by": by()})
                    return

        try:
            conn.send({"command": "run_task", "task": task, "mode": mode, "by": CALLER})
            threading.Thread(target=watch, daemon=True).start()
            while True:
                message = conn.receive()
                if message is None:
                    raise instance.ChannelError("the Holodesk app closed the connection during the task")
                if message.get("event") == "step":
                    on_step({k: v for k, v in message.items() if k != "event"})
                elif "ok" in message:
                    return message
        finally:
            finished.set()
            conn.close()

    def status(self) -> dict[str, Any]:
        """Who owns the desktop and whether a task runs."""
        if self.app_runs():
            reply = instance.request("status", env=self.env)
            return {"host": "the Holodesk app", **{k: v for k, v in reply.items() if k != "ok"}}
        if self.local_status is not None:
            return {"host": "this MCP server (the Holodesk app is not running)", **self.local_status()}
        if self.unavailable is not None:
            return {"host": f"none: {self.unavailable}", "running": False}
        return {"host": "none: the Holodesk app is not running", "running": False}


def list_episode_summaries(episodes_dir: Path, limit: int = 50) -> list[dict[str, Any]]:
    """Newest first: ``{"episode_id", "task", "status", "reason", "steps", "started_at"}`` per episode."""
    if not episodes_dir.is_dir():
        return []
    out = []
    for folder in sorted((p for p in episodes_dir.iterdir() if (p / EPISODE_FILE).is_file()), reverse=True)[:limit]:
        start: dict[str, Any] = {}
        end: dict[str, Any] = {}
        with contextlib.suppress(OSError):
            for line in (folder / EPISODE_FILE).read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if record.get("type") == "start":
                        start = record
                    elif record.get("type") == "end":
                        end = record
        out.append({"episode_id": folder.name, "task": start.get("task"), "started_at": start.get("started_at"),
                    "status": end.get("status", "running or interrupted"), "reason": end.get("reason"),
                    "steps": end.get("steps")})
    return out


def episode_folder(settings: Settings, episode_id: str) -> Path:
    """The folder of ``episode_id`` inside the episodes folder.

    Raises:
        ResourceError: not an episode name, or no such episode.
    """
    if not _EPISODE_ID.match(episode_id):
        raise ResourceError(f"{episode_id!r} is not an episode id (see list_episodes)")
    folder = settings.episodes_dir / episode_id
    if not (folder / EPISODE_FILE).is_file():
        raise ResourceError(f"no episode {episode_id!r} (see list_episodes)")
    return folder


def build_server(desk: Desk, settings: Settings) -> MCPServer:
    """The MCP server with Holodesk's tools (``run_task``, ``get_status``, ``list_episodes``) and resources
    (an episode's record, its screenshots)."""
    server: MCPServer = MCPServer(
        "holodesk", version=__version__,
        instructions="Holodesk carries out a task on the user's desktop, one approved step at a time. The user "
        "approves the steps on their screen; call run_task with the whole task in plain words and wait for its "
        "outcome. One task at a time.",
    )

    @server.tool(description="Carry out one task on the user's desktop and return how it ended. Every step is "
                 "approved on the user's screen (mode 'step'), or low-risk steps by the autopilot when the user "
                 "allowed 'auto'. Progress notifications tell each step in plain words.")
    async def run_task(task: str, ctx: Context,
                       mode: Literal[ApprovalMode.STEP, ApprovalMode.AUTO] | None = None) -> dict[str, Any]:
        return await _run_task_with_progress(desk, task, mode, ctx)

    @server.tool(description="Whether Holodesk (the desktop app, or this server) is running a task, the "
                 "approval mode, and the modes the user allows for callers.")
    def get_status() -> dict[str, Any]:
        return desk.status()

    @server.tool(description="The recorded episodes, newest first: id, task, status, reason, steps. Read one "
                 "as the resource holodesk://episodes/{episode_id}.")
    def list_episodes(limit: int = 20) -> list[dict[str, Any]]:
        return list_episode_summaries(settings.episodes_dir, max(1, min(limit, 200)))

    @server.resource("holodesk://episodes/{episode_id}", mime_type="application/jsonl",
                     description="One episode's record: JSON Lines (start, one line per step, end).")
    def episode(episode_id: str) -> str:
        return (episode_folder(settings, episode_id) / EPISODE_FILE).read_text(encoding="utf-8")

    @server.resource("holodesk://episodes/{episode_id}/{frame}", mime_type="image/png",
                     description="A screenshot of an episode (step-000.png ...), only when the user allowed "
                     "sharing screenshots (Settings: mcp_share_screenshots).")
    def screenshot(episode_id: str, frame: str) -> bytes:
        return episode_screenshot(settings, episode_id, frame)

    return server


async def _run_task_with_progress(desk: Desk, task: str, mode: str | None, ctx: Context) -> dict[str, Any]:
    """Run ``task`` through ``desk`` on a worker thread and return its outcome; each step's report goes to
    the caller as a progress notification (progress = the step number, message = :func:`step_message`), and
    while no step ends, one every :data:`HEARTBEAT_S` seconds (progress = steps done + a fraction that grows
    towards 1, so it always increases; message = :func:`heartbeat_message`).

    A cancelled call (also a client that disconnects) sets the task's stop event, naming who stopped it
    (:func:`who_stopped`), and waits (at most 60 s, shielded) for the worker to record the stop before the
    cancellation propagates.

    Raises:
        ToolError: the task could not run or failed (the message says why; errors that are not a
            :class:`HolodeskError` are logged with their traceback too).
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    cancel = threading.Event()  # set when the call is cancelled, the client disconnects or the host exits
    stopper = {"by": CALLER}  # who set ``cancel``, decided before it is set

    def on_step(report: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, ("step", report))

    def work() -> None:
        try:
            value: Any = ("done", desk.run_task(task, mode, on_step, cancel, lambda: stopper["by"]))
        except HolodeskError as exc:
            value = ("error", exc)
        except Exception as exc:  # reported to the caller and logged, never swallowed
            log.exception("run_task failed")
            value = ("error", exc)
        with contextlib.suppress(RuntimeError):  # the loop is gone when the server ended
            loop.call_soon_threadsafe(queue.put_nowait, value)

    worker = threading.Thread(target=work, name="holodesk-mcp-task", daemon=True)
    worker.start()
    done, beats = 0, 0
    try:
        while True:
            try:
                kind, value = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
            except TimeoutError:
                beats += 1
                await ctx.report_progress(done + 1 - 0.5 ** beats, None, heartbeat_message(done))
                continue
            if kind == "step":
                done, beats = int(value["step"]), 0
                await ctx.report_progress(float(value["step"]), None, step_message(value))
            elif kind == "error":  # told to the caller in words (other exceptions are logged above)
                raise ToolError(str(value)) from value
            else:
                return dict(value)
    except anyio.get_cancelled_exc_class():
        stopper["by"] = who_stopped()
        cancel.set()
        with anyio.CancelScope(shield=True):  # the stop is recorded before the handler ends
            await anyio.to_thread.run_sync(worker.join, 60.0)
        raise


def episode_screenshot(settings: Settings, episode_id: str, frame: str) -> bytes:
    """The PNG bytes of screenshot ``frame`` (``step-NNN.png``) of episode ``episode_id``.

    Raises:
        ResourceError: the user has not allowed sharing screenshots (``mcp_share_screenshots``), ``frame``
            is not a screenshot name, or no such episode or screenshot.
    """
    if not settings.mcp_share_screenshots:
        raise ResourceError("the user has not allowed sharing screenshots with MCP clients "
                            "(Settings: mcp_share_screenshots)")
    if not _FRAME.match(frame):
        raise ResourceError(f"{frame!r} is not a screenshot name (step-000.png, ...)")
    path = episode_folder(settings, episode_id) / frame
    if not path.is_file():
        raise ResourceError(f"episode {episode_id!r} has no {frame}")
    return path.read_bytes()


# -- HTTP ----------------------------------------------------------------------------------------------
ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                   Awaitable[None]]


def require_token(app: ASGIApp, token: str) -> ASGIApp:
    """Wrap an ASGI app: HTTP requests without ``Authorization: Bearer <token>`` get 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                      send: Callable[[Any], Awaitable[None]]) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                body = b'{"error": "missing or wrong bearer token (see holodesk mcp --print-config)"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def http_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/mcp"


def http_token(port: int) -> str:
    """The HTTP transport's bearer token: ``$HOLODESK_MCP_TOKEN``, else the one kept in the OS keychain
    for this URL, else a new random one stored there.

    Raises:
        SecretStoreError: no usable keychain (the message says to set ``HOLODESK_MCP_TOKEN``).
    """
    given = os.environ.get(TOKEN_ENV, "").strip()
    if given:
        return given
    try:
        kept = load_api_key(http_url(port))
        if kept:
            return kept
        token = secrets.token_urlsafe(32)
        store_api_key(http_url(port), token)
    except SecretStoreError as exc:
        raise SecretStoreError(f"no keychain to keep the MCP token in: {exc.message}",
                               hint=f"Set {TOKEN_ENV} to a long random string in the environment of both "
                               "`holodesk mcp --http` and your client.") from exc
    return token


async def serve_http(server: MCPServer, port: int, token: str) -> None:
    """Serve streamable HTTP on 127.0.0.1:``port`` (path ``/mcp``), requiring the bearer token."""
    # lazy (here and below): only `holodesk mcp --http` serves over HTTP (uvicorn and the transport's settings)
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                         allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}"],
                                         allowed_origins=[f"http://127.0.0.1:{port}", f"http://localhost:{port}"])
    app = server.streamable_http_app(transport_security=security, host="127.0.0.1")
    config = uvicorn.Config(require_token(app, token), host="127.0.0.1", port=port, log_level="warning")
    await uvicorn.Server(config).serve()


# -- setup ---------------------------------------------------------------------------------------------
SERVER_ENV = ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "XDG_SESSION_TYPE", "DBUS_SESSION_BUS_ADDRESS",
              "XAUTHORITY", "PYTHONPATH", "HOLODESK_CONFIG", "HOLODESK_DATA_DIR")
"""Variables the stdio server needs from the desktop session (and those that choose this installation and
its settings). Hosts start stdio servers with a few variables of their own (Codex: HOME, PATH, USER, LANG,
TERM, TMPDIR, TZ ...), so ``--print-config`` writes the values these have where it runs into the snippet."""

TOOL_TIMEOUT_MARGIN_S = 60
"""Seconds beyond the wall-time cap (``max_wall_s``) that a host waits for ``run_task``: the task has ended
(and its outcome is on the way) before the host gives up on the call."""


def server_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The :data:`SERVER_ENV` variables set in ``environ`` (default ``os.environ``), in that order."""
    environ = dict(os.environ) if environ is None else environ
    return {name: environ[name] for name in SERVER_ENV if environ.get(name)}


def print_config(host: str, *, http_port: int | None = None, max_wall_s: float = 900.0,
                 environ: dict[str, str] | None = None) -> str:
    """The snippet that registers Holodesk with ``host`` (claude-code / cursor / codex), working as pasted:
    a stdio snippet carries :func:`server_env` (the desktop session of the terminal it was printed in) and
    a tool timeout of ``max_wall_s`` + :data:`TOOL_TIMEOUT_MARGIN_S` where the host has one (Codex:
    ``tool_timeout_sec``; Claude Code: its ``MCP_TOOL_TIMEOUT`` variable, in milliseconds), so a task that
    waits for the user's approvals is not cut off by the host's default (Codex: 60 s).

    Raises:
        SettingsError: unknown host.
    """
    command, args = sys.executable, ["-m", "holodesk", "mcp"]
    if host not in HOSTS:
        raise SettingsError(f"unknown MCP host {host!r}", hint=f"Use one of: {', '.join(HOSTS)}.")
    timeout_s = int(max_wall_s) + TOOL_TIMEOUT_MARGIN_S
    if http_port is not None:
        url, token = http_url(http_port), http_token(http_port)
        if host == "claude-code":
            return (f"# Start the server: {command} -m holodesk mcp --http --port {http_port}\n"
                    f"# Approvals take time: start claude with MCP_TOOL_TIMEOUT={timeout_s * 1000} in its environment\n"
                    f"claude mcp add --transport http holodesk {url} --header 'Authorization: Bearer {token}'\n")
        if host == "cursor":
            return ("// ~/.cursor/mcp.json (start the server first: holodesk mcp --http --port "
                    f"{http_port})\n" + json.dumps({"mcpServers": {"holodesk": {
                        "url": url, "headers": {"Authorization": f"Bearer {token}"}}}}, indent=2) + "\n")
        return (f"# ~/.codex/config.toml (start the server first: holodesk mcp --http --port {http_port});\n"
                f"# export {TOKEN_ENV}={token} in the shell that starts codex\n"
                f"[mcp_servers.holodesk]\nurl = \"{url}\"\nbearer_token_env_var = \"{TOKEN_ENV}\"\n"
                f"tool_timeout_sec = {timeout_s}\n")
    env = server_env(environ)
    if "DISPLAY" in env or "WAYLAND_DISPLAY" in env:
        said = ("The environment below is this desktop session's: print this again after logging in anew if the "
                "server reports a missing desktop.")
    else:
        said = ("No desktop session was found here (DISPLAY and WAYLAND_DISPLAY are unset): print this again from a "
                "terminal of your desktop, or the server will report the missing desktop.")
    if host == "claude-code":
        flags = "".join(f" -e {shlex.quote(f'{k}={v}')}" for k, v in env.items())
        return (f"# {said}\n# Approvals take time: start claude with MCP_TOOL_TIMEOUT={timeout_s * 1000} in its "
                f"environment\nclaude mcp add holodesk{flags} -- {shlex.quote(command)} {' '.join(args)}\n")
    if host == "cursor":
        return (f"// ~/.cursor/mcp.json\n// {said}\n"
                + json.dumps({"mcpServers": {"holodesk": {"command": command, "args": args, "env": env}}}, indent=2)
                + "\n")
    table = "".join(f"{k} = {json.dumps(v)}\n" for k, v in env.items())
    return (f"# ~/.codex/config.toml\n# {said}\n[mcp_servers.holodesk]\ncommand = {json.dumps(command)}\n"
            f"args = {json.dumps(args)}\ntool_timeout_sec = {timeout_s}\n\n[mcp_servers.holodesk.env]\n{table}")


def no_desktop(exc: HolodeskError) -> DisplayError:
    """What a caller is told when this server's environment names no usable desktop: ``exc``'s words and
    how to give the server the desktop session through the host's configuration."""
    return DisplayError(f"this Holodesk MCP server has no desktop to work on: {exc.message}",
                        hint="Give the server your desktop session's variables (DISPLAY, WAYLAND_DISPLAY, "
                        "XDG_RUNTIME_DIR, DBUS_SESSION_BUS_ADDRESS, XAUTHORITY) in your MCP host's configuration: "
                        "`holodesk mcp --print-config HOST`, run in a terminal of your desktop, prints them; then "
                        "restart the host.")


def run(*, http_port: int | None = None, script: Path | None = None) -> int:
    """``holodesk mcp``: serve until the client goes away (stdio) or the process is stopped (HTTP).

    Tasks go to the desktop app when it runs; otherwise this process hosts them (needs a display). Without
    a usable desktop the server still answers (``initialize``, the tools, the episodes), and each
    ``run_task`` reports the missing desktop (:func:`no_desktop`) as its tool error.

    Raises:
        SettingsError, SecretStoreError: bad settings; no keychain for the HTTP token.
    """
    # stdout is the protocol's wire. Stray output (python-xlib prints its warnings to stdout) must never
    # reach it: fd 1 points at stderr while Qt and the app start and after serving, the SDK diverts it while
    # it serves, and Python's stdout writes through at once so nothing waits in a buffer for the wire.
    wire = os.dup(1) if http_port is None else -1
    if wire >= 0:
        sys.stdout.flush()
        os.dup2(2, 1)
        if hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(line_buffering=True, write_through=True)
    # lazy: loaded only now that fd 1 points at stderr (python-xlib prints its warnings to stdout as it loads)
    from holodesk.session.factory import desktop_backend

    settings = load_settings()
    if script is not None:  # a replay, as `holodesk run --script`
        settings = settings.model_copy(update={"policy": "script", "script_file": script})
    token = http_token(http_port) if http_port is not None else None

    def serve_desk(desk: Desk) -> None:
        server = build_server(desk, settings)
        if http_port is not None and token is not None:
            print(f"holodesk mcp: serving {http_url(http_port)} (bearer token required)", file=sys.stderr)
            anyio.run(serve_http, server, http_port, token)
        else:
            global _client_input
            sys.stdout.flush()
            os.dup2(wire, 1)
            os.close(wire)
            _client_input = os.dup(0)  # the SDK points fd 0 at the null device while it serves
            try:
                anyio.run(server.run_stdio_async)
            finally:
                sys.stdout.flush()
                os.dup2(2, 1)
                os.close(_client_input)
                _client_input = -1

    try:
        desktop_backend(settings)  # a clear DisplayError when no backend can see this desktop (X11 or Wayland)
    except DisplayError as exc:  # serve anyway: the caller learns why in the tool result, not "connection closed"
        unavailable = no_desktop(exc)
        log.error("%s", unavailable)  # on stderr, where hosts show a server's log
        serve_desk(Desk(None, unavailable=unavailable))
        return 0
    from holodesk.ui.host import host_tasks  # lazy: Qt loads only when this process hosts the tasks

    return host_tasks(settings, lambda remote: serve_desk(Desk(remote.run_task, remote.status)))
