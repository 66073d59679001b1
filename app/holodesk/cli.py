"""The ``holodesk`` command: ``tray`` (default), ``run``, ``stop``, ``palette``, ``mcp``, ``download``,
``doctor``, ``bench``, ``eval``, ``tiny-checkpoint``.

Each sub-command parses its flags and calls one function. A command imports what only it needs inside
its function (the imports marked "lazy: start-up time"): ``holodesk stop`` and ``holodesk palette`` run from
a desktop shortcut and must answer at once, and only the commands that use them load the settings schema
(pydantic), Qt, the session, the policies, the MCP SDK, the bench and the evaluation.

Errors derived from HolodeskError are printed as one clear message (with what to do) and exit with status 2;
nothing prints a traceback at the user unless ``--debug`` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from holodesk import __version__
from holodesk.core.approval import ApprovalMode
from holodesk.core.policy_options import add_policy_options, policy_overrides
from holodesk.core.text import display_safe
from holodesk.display import check_display
from holodesk.errors import ActionError, HolodeskError, SettingsError
from holodesk.instance import DriveLock, InstanceLock, NotRunning, app_running, request
from holodesk.policy.models import series_names
from holodesk.policy.native.families import FAMILIES, check_checkpoint_before_weights

if TYPE_CHECKING:
    from holodesk.policy.base import ActionProtocol, Policy
    from holodesk.settings import Settings

log = logging.getLogger("holodesk")

EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_STOPPED = 0, 1, 2, 3


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="holodesk", description="A desktop assistant that uses the computer "
                                     "for you, one approved step at a time.")
    parser.add_argument("--version", action="version", version=f"holodesk {__version__}")
    parser.add_argument("--debug", action="store_true", help="log debug details and show tracebacks")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="carry out one task from the terminal")
    run.add_argument("task", help="what to do, in plain words")
    # --script --model --endpoint --precision --think --greedy --seed
    add_policy_options(run, models=series_names())
    run.add_argument("--approve", choices=[m.value for m in ApprovalMode],
                     help="step: ask before every action; auto: autopilot approves low-risk actions, asks for "
                     "high-risk ones (default: the 'approval' setting, which is 'step' unless you changed it; the run "
                     "says which is in force)")
    run.add_argument("--monitor", type=int, help="the one monitor to act on (1 = first; `holodesk doctor` lists them)")
    run.add_argument("--max-steps", type=int, help="hard cap on steps")
    run.add_argument("--max-seconds", type=float, help="hard cap on wall time")
    run.add_argument("--episodes-dir", type=Path, help="where to record the episode (default: data dir)")
    run.add_argument("--json", action="store_true", help="print the result as one JSON object at the end")

    sub.add_parser("stop", help="stop the task the running app is carrying out")
    sub.add_parser("palette", help="open the running app's command box (bind it to a shortcut on Wayland)")
    mcp = sub.add_parser("mcp", help="serve Holodesk to other agents over the Model Context Protocol (stdio; "
                         "--http for loopback HTTP with a token)")
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP on 127.0.0.1 instead of stdio")
    mcp.add_argument("--port", type=int, default=8765, help="HTTP port on 127.0.0.1 (default 8765)")
    mcp.add_argument("--script", type=Path, help="replay a file of protocol replies when this process hosts the "
                     "task (the app, when it runs, uses its own settings)")
    mcp.add_argument("--print-config", metavar="HOST", choices=["claude-code", "cursor", "codex"],
                     help="print the snippet that registers Holodesk with claude-code, cursor or codex, and exit")
    download = sub.add_parser("download", help="download a model from the Hugging Face hub into the model cache "
                              "(resumable; every file checked against the hub's sha256)")
    download.add_argument("model", nargs="?", help="Hugging Face repo id (owner/name) or a listed model's short "
                          "name (holotron-12b, holo2-8b, holo3.1-9b, ...); default: the 'model' setting's model")
    download.add_argument("--revision", default="main", help="branch, tag or commit (default: main)")
    download.add_argument("--cache-dir", type=Path, help="model cache folder (default: HF_HUB_CACHE, else "
                          "~/.cache/huggingface/hub)")
    download.add_argument("--login", action="store_true", help="ask for a hub token first and keep it in the "
                          "system keychain (for gated or private models)")

    doctor = sub.add_parser("doctor", help="report what this machine offers Holodesk (display, monitors, GPU, kernels)")
    doctor.add_argument("--json", action="store_true", help="print the report as one JSON object "
                        "({section: {item: value}}) instead of text")
    tray = sub.add_parser("tray", help="start the desktop app (default)")
    tray.add_argument("--no-tray", action="store_true", help="open the small window instead of the tray icon")

    bench = sub.add_parser("bench", help="measure the local runtime's speed and memory", add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="options of the benchmark (see --help)")
    evaluate = sub.add_parser("eval", help="measure task success (a suite on a fresh Xvfb desktop), compare "
                              "reports, click accuracy (grounding)", add_help=False)
    evaluate.add_argument("rest", nargs=argparse.REMAINDER, help="options of the evaluation (see --help)")

    tiny = sub.add_parser("tiny-checkpoint", help="write a tiny random checkpoint in a model family's published "
                          "layout (for tests)")
    tiny.add_argument("path", type=Path, help="the folder to write (created; config.json, weights, tokenizer)")
    tiny.add_argument("--family", default="holotron",
                      choices=[family.key for family in FAMILIES],
                      help="; ".join(f"{family.key}: {family.models}" for family in FAMILIES)
                      + "; default holotron")
    tiny.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``holodesk`` script. Returns the process exit status."""
    parser = _build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command not in ("bench", "eval"):
        parser.error("unrecognized arguments: " + " ".join(unknown))
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command in ("stop", "palette"):
            return cmd_app_command(args.command)
        if args.command == "mcp":
            return cmd_mcp(args)
        if args.command == "download":
            return cmd_download(args)
        if args.command == "doctor":
            # lazy: start-up time (see the module docstring)
            from holodesk.doctor import print_report

            return print_report(sys.stdout, as_json=args.json)
        if args.command == "bench":
            # lazy: start-up time (see the module docstring)
            from holodesk.bench.cli import main as bench_main

            # the bench parses its own options (holodesk bench --help lists them)
            return int(bench_main([*unknown, *args.rest]) or 0)
        if args.command == "eval":
            # lazy: start-up time (see the module docstring)
            from holodesk.eval.cli import main as eval_main

            return eval_main([*unknown, *args.rest])  # parses its own options (holodesk eval --help)
        if args.command == "tiny-checkpoint":
            # lazy: start-up time (see the module docstring)
            from holodesk.bench.cli import local_runtime_missing

            missing = local_runtime_missing()  # the writer draws the weights with torch
            if missing is not None:
                raise HolodeskError(f"the local runtime is not installed: {missing}",
                                    hint="Install it with: pip install 'holodesk[local]'.")
            # lazy: start-up time (see the module docstring)
            from holodesk.bench.families import write_checkpoint

            print(write_checkpoint(args.path, family=args.family, seed=args.seed))
            return EXIT_OK
        return cmd_tray(getattr(args, "no_tray", False))
    except (HolodeskError, OSError) as exc:  # expected: bad input, missing files, no display, no model
        if args.debug:
            log.exception("failed")
        print(f"holodesk: {terminal_safe(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("holodesk: interrupted", file=sys.stderr)
        return EXIT_STOPPED


def cmd_tray(no_tray: bool) -> int:
    """Start the desktop app; when it already runs on this desktop, open its command box and exit
    (one app per desktop: one tray icon, one command box, one set of hotkeys)."""
    # lazy: start-up time (see the module docstring)
    from holodesk.session.factory import desktop_backend
    from holodesk.settings import load_settings

    try:
        settings: Settings | None = load_settings()
    except SettingsError as exc:
        if not check_display().usable:
            raise  # no window can show it: the terminal does
        print(f"holodesk: {exc}", file=sys.stderr)
        settings = None  # the app shows the error in a window (started from a launcher, nobody reads a terminal)
    desktop_backend(settings)  # a clear DisplayError when no backend can see this desktop
    lock = InstanceLock.acquire()
    if lock is None and lock_held_by_an_app():
        return cmd_app_command("palette", already_running=True)
    lock = lock or InstanceLock.acquire()
    if lock is None:
        raise HolodeskError("another Holodesk is starting on this desktop", hint="Wait a moment and try again.")
    # lazy: start-up time (see the module docstring)
    from holodesk.ui.app import run_app

    return run_app(force_window=no_tray, instance=lock)


def cmd_mcp(args: argparse.Namespace) -> int:
    """``holodesk mcp``: the MCP server (see :mod:`holodesk.mcp_server`), or ``--print-config HOST``."""
    # lazy: start-up time (see the module docstring)
    from holodesk import mcp_server

    if args.print_config:
        # lazy: start-up time (see the module docstring)
        from holodesk.settings import load_settings

        print(mcp_server.print_config(args.print_config, http_port=args.port if args.http else None,
                                      max_wall_s=load_settings().max_wall_s), end="")
        return EXIT_OK
    return mcp_server.run(http_port=args.port if args.http else None, script=args.script)


def lock_held_by_an_app(wait_s: float = 0.5) -> bool:
    """After the instance lock was found taken: True when an app really holds it, False when it was a
    passing check (``holodesk stop``/``palette`` test the lock for a moment) and is free again."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not app_running():
            return False
        time.sleep(0.05)
    return True


def cmd_app_command(command: str, *, already_running: bool = False) -> int:
    """``holodesk stop`` / ``holodesk palette``: ask the app running on this desktop over the local
    channel (:mod:`holodesk.instance`); Qt is not started. Exit 0 done, 1 nothing to do / not running."""
    try:
        reply = request(command)
    except NotRunning as exc:
        print(f"holodesk: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not reply.get("ok"):
        print(f"holodesk: the app refused: {reply.get('error')}", file=sys.stderr)
        return EXIT_FAILED
    prefix = "Holodesk is already running on this desktop: " if already_running else ""
    if command == "stop":
        print("Stopped the running task." if reply.get("stopped") else "No task was running.")
        return EXIT_OK if reply.get("stopped") else EXIT_FAILED
    print(f"{prefix}{reply.get('message', '')}.")
    return EXIT_OK if reply.get("opened") else EXIT_FAILED


def cmd_run(args: argparse.Namespace) -> int:
    """``holodesk run``: one task with terminal approval. Exit 0 finished, 1 failed, 3 stopped."""
    # lazy: start-up time (see the module docstring)
    from holodesk.session.loop import check_task
    from holodesk.settings import load_settings

    task = check_task(args.task)  # before a model is loaded

    settings = load_settings(
        **policy_overrides(args),
        approval=args.approve,
        monitor=args.monitor,
        max_steps=args.max_steps,
        max_wall_s=args.max_seconds,
    )
    drive = DriveLock.acquire()  # one task drives the desktop (DesktopBusy names the one that does)
    try:
        return _run_task(args, task, settings)
    finally:
        drive.release()


def _load_policy(settings: Settings) -> Policy:
    """The settings' policy, with the local model's download and load progress on one terminal line."""
    # lazy: start-up time (see the module docstring)
    from holodesk.download.progress import TerminalProgress
    from holodesk.session.factory import build_policy

    loading = TerminalProgress(sys.stderr)
    try:
        return build_policy(settings, progress=loading.line)
    finally:
        loading.close()


def _run_task(args: argparse.Namespace, task: str, settings: Settings) -> int:
    """The body of ``holodesk run`` once the desktop is ours."""
    # lazy: start-up time (see the module docstring)
    from holodesk.session.approval import ApprovalPolicy
    from holodesk.session.factory import build_session
    from holodesk.session.state import State

    printer = EventPrinter()
    session = build_session(
        settings,
        lambda policy: ApprovalPolicy(settings.approval, TerminalApprover(sys.stdin, sys.stdout,
                                                                          protocol=policy.protocol, printer=printer)),
        policy=_load_policy,
        episodes_dir=args.episodes_dir,
        focus_probe=_focus_probe(),
        window_probe=_window_probe(),
    )
    session.subscribe(printer)
    line = thinking_line(session.policy, settings)
    if line:
        print(line)
    if settings.approval is ApprovalMode.AUTO:
        source = "--approve auto" if args.approve else "the 'approval' setting"
        print(f"Autopilot is on ({source}): low-risk steps run without asking; use --approve step to be asked "
              "before every action.")
    try:
        result = session.run(task)
    finally:
        session.policy.close()
        session.close()
    print(f"Result: {result.status.value} — {terminal_safe(result.reason)}")
    if result.answer:
        print(f"Answer: {terminal_safe(result.answer, keep_newlines=True)}")
    if result.episode_path:
        print(f"Episode recorded in {result.episode_path}")
    if args.json:
        print(json.dumps({"status": result.status.value, "reason": result.reason, "answer": result.answer,
                          "steps": result.steps, "episode": str(result.episode_path)}))
    return {State.FINISHED: EXIT_OK, State.STOPPED: EXIT_STOPPED}.get(result.status, EXIT_FAILED)


def cmd_download(args: argparse.Namespace) -> int:
    """``holodesk download MODEL``: fetch a model into the hub cache with one progress line. Exit 0 done,
    2 failed (the message says why and what to do), 3 stopped by SIGINT (Ctrl+C; run again to resume).

    While the download runs, SIGINT sets its cancel event (see :func:`cancel_on_sigint`),
    so it is honoured even where the process inherited SIGINT ignored and whatever the main thread is
    doing: the download's worker refuses every further write at once."""
    # lazy: start-up time (see the module docstring)
    from holodesk.download.errors import DownloadCancelled
    from holodesk.download.hub import hub_token, store_hub_token
    from holodesk.download.manager import download_model
    from holodesk.download.progress import TerminalProgress
    from holodesk.policy.source import hub_repo
    from holodesk.settings import load_settings

    args.model = hub_repo(args.model or load_settings().model)
    if args.login:  # Ctrl+C at the prompt: KeyboardInterrupt, as everywhere else
        token = getpass.getpass("Hugging Face token (from https://huggingface.co/settings/tokens): ").strip()
        if not token:
            raise HolodeskError("no token was given", hint="Paste a read token, or leave out --login.")
        store_hub_token(token)
        print("The token is kept in the system keychain.")
    bar = TerminalProgress(sys.stdout)
    cancel = threading.Event()
    with cancel_on_sigint(cancel):
        try:
            result = download_model(args.model, revision=args.revision, cache_dir=args.cache_dir, progress=bar,
                                    cancel=cancel, token=hub_token(), verify_cached=True,
                                    before_weights=lambda folder: check_checkpoint_before_weights(folder, args.model))
        except DownloadCancelled:
            bar.close()
            print("holodesk: download stopped; run the same command again to resume it", file=sys.stderr)
            return EXIT_STOPPED
        finally:
            bar.close()
    print(f"{args.model} is ready in {result.folder} ({result.downloaded_bytes} bytes downloaded, "
          f"{result.reused_bytes} bytes were already here)")
    return EXIT_OK


@contextlib.contextmanager
def cancel_on_sigint(cancel: threading.Event) -> Iterator[None]:
    """Within the block, SIGINT (Ctrl+C) sets ``cancel`` instead of raising KeyboardInterrupt; the
    previous handler is restored afterwards. The handler is installed whatever the inherited disposition
    (a background job of a non-interactive shell starts with SIGINT ignored), so a stop request sent to
    the process is never lost. Off the main thread (where Python allows no handler) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        cancel.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        if previous is not None:  # None: a handler installed outside Python, which cannot be restored
            signal.signal(signal.SIGINT, previous)


def _focus_probe() -> Any:
    try:  # lazy: the window probes need python-xlib and an X display; none without them
        from holodesk.control.window import focused_window_class
    except ImportError:
        return None
    return focused_window_class


def _window_probe() -> Any:
    try:  # lazy: as in _focus_probe
        from holodesk.control.window import window_at
    except ImportError:
        return None
    return window_at


def terminal_safe(text: str, *, keep_newlines: bool = False) -> str:
    """Model text made inert for a terminal (F10, F24): :func:`holodesk.core.text.display_safe`, which
    shows control characters (escape sequences, carriage returns, and line breaks unless
    ``keep_newlines``), invisible format characters and lone surrogates as escapes (``\\x1b``,
    ``\\n``), so a reply can neither restyle the terminal, fake a line of the approval prompt nor
    break the output's encoding. Printable Unicode is kept as is."""
    return display_safe(text, keep_newlines=keep_newlines)


_STAGES = ("preprocess", "vision", "prefill", "decode", "build_prompt", "encode_images", "request")


def policy_cost(timings_ms: dict[str, float], extra: dict[str, Any]) -> str:
    """``"model 535 ms (preprocess 5, vision 31, prefill 155, decode 342; static decoder)"`` from a
    proposal's stage timings (ms) and details, or "" when the policy reports no stages (scripted)."""
    stages = [(k, float(timings_ms[k])) for k in _STAGES if k in timings_ms]
    if not stages:
        return ""
    total = float(timings_ms.get("total", sum(v for k, v in stages if k != "request")))
    where = f"; {extra['decoder']} decoder" if extra.get("decoder") else ""
    return f"model {total:.0f} ms ({', '.join(f'{k} {v:.0f}' for k, v in stages)}{where})"


def thinking_line(policy: Policy, settings: Settings) -> str:
    """``holodesk run``'s line on thinking: when ``policy`` thinks before acting (its ``options.reasoning``), what
    that costs a step on this machine (:func:`holodesk.policy.thinking_cost.this_machine_note`); "" otherwise."""
    if not getattr(getattr(policy, "options", None), "reasoning", False):
        return ""
    from holodesk.policy.thinking_cost import this_machine_note  # lazy: start-up time

    note = this_machine_note(policy=settings.policy, model=settings.model, precision=settings.precision)
    return f"Think before acting is on. {note}"


class EventPrinter:
    """Prints a run's events on stdout: the step's thinking growing on one ``[step N] thinking: `` line while the
    step is generated (each piece as it comes, escaped by :func:`terminal_safe`), then the proposal's thought
    (only when it is not the text just shown as thinking: a scripted reply without a reasoning block streams its
    thought), its cost, the autopilot's decisions, results and warnings, each on its own line."""

    def __init__(self) -> None:
        self.thinking_step: int | None = None  # the step whose thinking line is open (no newline yet)
        self.thinking: dict[int, str] = {}  # each step's thinking as shown so far (the joined pieces)
        self.thoughts: dict[int, str] = {}  # each step's proposal thought, once shown (thinking or thought line)

    def showed_thought(self, step: int, thought: str) -> bool:
        """True when ``thought`` (a proposal's) is already on the terminal for ``step`` (0-based)."""
        return bool(thought.strip()) and self.thoughts.get(step) == thought.strip()

    def __call__(self, event: Any) -> None:
        if event.kind == "thought":
            if self.thinking_step != event.step:
                self._end_line()
                print(f"[step {event.step + 1}] thinking: ", end="")
                self.thinking_step = event.step
            print(terminal_safe(event.message), end="", flush=True)
            self.thinking[event.step] = self.thinking.get(event.step, "") + event.message
            return
        if event.kind == "state":
            return  # a state change does not end the thinking line (the proposal does)
        self._end_line()
        if event.kind == "proposal":
            self._print_proposal(event.step, event.data["proposal"])
        else:
            _print_event(event)

    def _print_proposal(self, step: int, proposal: Any) -> None:
        """``[step N] thought: ...`` unless the thinking shown for the step was that same text, then the cost."""
        thought = proposal.thought.strip()
        if thought and thought != self.thinking.pop(step, "").strip():
            print(f"[step {step + 1}] thought: {terminal_safe(proposal.thought)}")
        self.thoughts[step] = thought
        cost = policy_cost(proposal.timings_ms, proposal.extra)
        if cost:
            print(f"[step {step + 1}] {cost}")

    def _end_line(self) -> None:
        if self.thinking_step is not None:
            print()
            self.thinking_step = None


def _print_event(event: Any) -> None:
    if event.kind == "decision" and event.data["response"].by == "autopilot":
        # lazy: start-up time (see the module docstring)
        from holodesk.session.approval import element_words

        request, decision = event.data["request"], event.data["response"].decision.value
        said = "approved" if decision == "approve" else f"decided {decision}"
        named = element_words(request.element, request.input_points)  # the card's words for the element
        print(f"[step {event.step + 1}] {said} by the autopilot ({request.risk.level.value} risk: "
              f"{terminal_safe(request.risk.reason)}): {terminal_safe(request.description)}"
              + (f" — {terminal_safe(named)}" if named else ""))
    elif event.kind == "result":
        print(f"[step {event.step + 1}] {event.data['result'].status}: {terminal_safe(event.message)}")
    elif event.kind in ("warning", "error"):
        where = f"[step {event.step + 1}] " if event.step >= 0 else ""
        print(f"{where}warning: {terminal_safe(event.message)}")


class TerminalApprover:
    """Asks on the terminal: ``[a]pprove / [e]dit / [s]kip / [q]uit``. End of input means quit.

    Leads with the same headline as the overlay card (:func:`holodesk.core.wording.step_words`), then
    its details, the exact text to type, the risk and the model's thought (unless ``printer`` has just shown
    that thought for the step). Model text is escaped (:func:`terminal_safe`, ``repr`` quoting for typed text and
    the thought), so control characters and markup show literally (field case F10).
    """

    def __init__(self, stdin: TextIO, stdout: TextIO, *, protocol: ActionProtocol,
                 printer: EventPrinter | None = None) -> None:
        """``protocol``: the one the policy speaks (``policy.protocol``); an edited tool call is read in it.
        ``printer``: the run's :class:`EventPrinter`, whose shown thoughts the prompt does not repeat."""
        self.stdin = stdin
        self.stdout = stdout
        self.protocol = protocol
        self.printer = printer

    def _ask(self, prompt: str) -> str | None:
        """``prompt``, then one line of input (stripped; None at the input's end). An answer that did not come from
        a terminal (piped) is echoed, so that what follows starts on a line of its own."""
        self.stdout.write(prompt)
        self.stdout.flush()
        line = self.stdin.readline()
        if line == "":
            return None
        if not (hasattr(self.stdin, "isatty") and self.stdin.isatty()):
            self.stdout.write(f"{terminal_safe(line.strip())}\n")
        return line.strip()

    def __call__(self, request: Any) -> Any:
        # lazy: start-up time (see the module docstring)
        from holodesk.session.approval import ApprovalResponse, Decision
        from holodesk.session.state import STOPPED_BY_NO_INPUT

        out = self.stdout
        # the same words as the overlay card: headline first, then where, risk and the model's thought
        out.write(f"\nStep {request.step + 1}: {terminal_safe(request.description)}\n")
        for detail in getattr(request, "details", ()):
            out.write(f"  {terminal_safe(detail)}\n")
        action = request.action
        if getattr(action, "kind", "") == "type":
            out.write(f"  exact text: {action.text!r}\n")
        out.write(f"  risk: {request.risk.level.value} ({terminal_safe(request.risk.reason)})\n")
        thought = request.proposal.thought
        if thought and not (self.printer and self.printer.showed_thought(request.step, thought)):
            out.write(f"  model's thought: {thought!r}\n")
        while True:
            answer = self._ask("  [a]pprove / [e]dit / [s]kip / [q]uit? ")
            if answer is None:
                out.write("\n  (no more input: stopping)\n")
                return ApprovalResponse(Decision.STOP, by=STOPPED_BY_NO_INPUT)
            choice = (answer[:1] or "a").lower()
            if choice == "a":
                return ApprovalResponse(Decision.APPROVE)
            if choice == "s":
                out.write("  skipped: nothing was done\n")
                return ApprovalResponse(Decision.SKIP)
            if choice == "q":
                out.write("  stopping\n")
                return ApprovalResponse(Decision.STOP)
            if choice == "e":
                edited = self._edit(request)
                if edited is not None:
                    return ApprovalResponse(Decision.EDIT, action=edited)
                continue
            out.write("  please answer a, e, s or q\n")

    def _edit(self, request: Any) -> Any:
        """Read a replacement tool call as JSON in the policy's protocol (:attr:`protocol`), e.g. in
        agent-loop-v1 ``{"tool_name": "click_desktop", "element": "OK button", "x": 500, "y": 500}``; a drag
        starts where the proposed action starts. Returns the action, or None (nothing typed, or not valid:
        the reason is printed)."""
        # lazy: start-up time (see the module docstring)
        from holodesk.core.actions import Click, Drag, Point

        protocol = self.protocol
        example = json.loads(protocol.to_reply(Click(Point(500, 500), element="OK button")))["tool_call"]
        line = self._ask(f"  new tool call as {protocol.name} JSON (e.g. {json.dumps(example)}): ")
        if not line:
            return None
        pointer = request.action.start if isinstance(request.action, Drag) else None
        try:
            reply = json.dumps({"thought": "edited by the user", "note": None, "tool_call": json.loads(line)})
            return protocol.parse(reply, pointer=pointer).action
        except (ValueError, HolodeskError, ActionError) as exc:
            self.stdout.write(f"  not a valid action: {exc}\n")
            return None


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
