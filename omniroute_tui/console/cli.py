"""`omniroute-tui`: the operations console."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..config import ConfigError, load_router_config
from ..config.hidden import hidden_reason
from ..config.limits import GatewayLimits
from ..logs import add_log_arguments, configure_logging
from .model.attach import AttachError

__all__ = ["build_app", "main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omniroute-tui",
        description="Watch and operate the resilience engine. With no arguments: the "
                    "scenario picker, over the demo scenario in virtual time.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--scenario", metavar="FILE",
                        help="a scenario file or shipped scenario name (default: demo)")
    parser.add_argument("--config", metavar="FILE", type=Path,
                        help="a router config: show and operate that router on real time; "
                             "with --scenario, replay the scenario against this config's "
                             "providers, routes and resilience settings (fakes stand in)")
    source.add_argument("--lesson", metavar="NAME",
                        help="run a guided lesson (omniroute-sim lessons lists them): its "
                             "scenario with the steps in a panel; space continues, enter "
                             "reveals an answer")
    parser.add_argument("--html", metavar="FILE", type=Path,
                        help="with --lesson: write the lesson as a self-contained HTML page "
                             "(the steps beside the charts) instead of running it")
    source.add_argument("--attach", metavar="URL",
                        help="attach to a running omniroute-gateway's management API")
    parser.add_argument("--token-file", metavar="FILE",
                        help="with --attach: the management API token (or $OMNIROUTE_TOKEN)")
    parser.add_argument("--live", action="store_true",
                        help="run the scenario in real time against its fakes over HTTP "
                             "(127.0.0.1), the router calling them with httpx")
    parser.add_argument("--db", metavar="FILE",
                        help="with --config: keep the router's state in this SQLite file")
    parser.add_argument("--db-recover", choices=("ask", "set-aside"), default="ask",
                        help="a corrupt --db: ask (default) or set it aside and start empty")
    parser.add_argument("--listen", metavar="HOST:PORT",
                        help="also serve the gateway from this console's router (with "
                             "--config or --live)")
    parser.add_argument("--serve-room", metavar="HOST:PORT",
                        help="with a replay: serve it to a room, read-only; trainees "
                             "--attach http://HOST:PORT and follow this console's run")
    parser.add_argument("--speed", type=float, default=2.0,
                        help="virtual seconds per wall second (default: 2)")
    parser.add_argument("--read-only", action="store_true",
                        help="refuse every operator action")
    parser.add_argument("--operator", default=None,
                        help="the name written to the audit log (default: your login name)")
    parser.add_argument("--web", action="store_true",
                        help="serve the console to a browser (textual-serve), read-only "
                             "unless --web-write")
    parser.add_argument("--web-write", action="store_true",
                        help="with --web: allow operator actions from the browser")
    parser.add_argument("--port", type=int, default=8000, help="with --web (default 8000)")
    parser.add_argument("--host", default="127.0.0.1", help="with --web (default 127.0.0.1)")
    parser.add_argument("--log-file", metavar="FILE", type=Path,
                        help="append the log lines (the gateway's with --listen, the "
                             "store's) to FILE; the terminal is the console's")
    add_log_arguments(parser, where="--log-file", defaults=False)
    return parser


def _log_to_file(args: argparse.Namespace) -> None:
    """The console's log lines go to `--log-file` (the screen would tear them up)."""
    if args.log_file is None:
        if args.log_format is not None or args.log_level is not None:
            raise ValueError("--log-format and --log-level say how to write --log-file FILE: "
                             "give it too (the terminal is the console's)")
        return
    try:
        stream = args.log_file.open("a", encoding="utf-8", buffering=1)
    except OSError as exc:
        raise ValueError(f"--log-file: {exc}") from None
    configure_logging(args.log_format or "text", args.log_level or "info", stream)


def _operator(name: str | None) -> str:
    """The name the audit log gives this console's actions: one that shows as written
    (docs/design.md §8), and that the state database can hold (an argument byte that is
    not UTF-8 arrives as a lone surrogate, on which every later write would fail)."""
    if name:
        reason = hidden_reason(name, "the operator name")
        if reason is not None:
            raise ValueError(f"--operator: {reason}")
        return name
    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = os.environ.get("USER", "operator")
    reason = hidden_reason(login, "the operator name (from the login name; give --operator "
                                  "NAME)")
    if reason is not None:
        raise ValueError(reason)
    return login


def build_app(args: argparse.Namespace, *, attach_state: dict[str, Any] | None = None
              ) -> object:
    """The console app for parsed arguments; raises ConfigError for bad files.

    `attach_state` is the gateway's state when the caller fetched it already.
    """
    from ..engine.bus import EventBus
    from .app import ConsoleApp
    from .model.backends import LiveBackend, RouterBackend, SimulationBackend
    from .model.console_model import ConsoleModel

    if args.speed <= 0:
        raise ValueError("--speed must be above 0")
    operator = _operator(args.operator)  # before anything is opened or started
    if getattr(args, "lesson", None):
        from .lesson_cli import lesson_app

        return lesson_app(args, operator)
    if getattr(args, "attach", None):
        if args.config is not None:
            raise ValueError("--attach shows a running gateway: it takes no --config")
        if getattr(args, "serve_room", None):
            raise ValueError("--serve-room serves this console's own replay: not with --attach")
        return _attach_app(args, attach_state, operator)
    scenario_name = getattr(args, "scenario", None)
    if getattr(args, "serve_room", None):
        check_room(args)
    if args.db and (args.config is None or scenario_name):
        raise ValueError("--db keeps a router's state: it goes with --config (a scenario "
                         "always starts fresh)")
    listen = token = None
    if getattr(args, "listen", None):
        from ..config.token import load_token
        from ..gateway import parse_listen

        listen = parse_listen(args.listen)
        token = load_token(getattr(args, "token_file", None))
        if (args.config is None or scenario_name) and not args.live:
            raise ValueError("--listen serves a router on real time: use it with --config or "
                             "--live (a replay runs on virtual time)")
    if args.config is not None and not scenario_name:
        if args.live:
            raise ValueError("--live runs a scenario's fakes; --config runs your own router")
        config = load_router_config(args.config)
        bus = EventBus()
        router_backend = RouterBackend(config, bus, db=args.db or config.store_path,
                                       recover=args.db_recover == "set-aside")
        model = ConsoleModel(config.providers, router_backend.now_ms, routes=config.routes)
        bus.subscribe(model.on_event)
        status = None
        if listen is not None:
            import time

            from ..config.status import ConfigStatus

            status = ConfigStatus(str(args.config), config.version, time.time_ns() // 1_000_000)
        return ConsoleApp(router_backend, model, operator=operator,
                          read_only=args.read_only, listen=listen, token=token,
                          metrics=config.gateway_metrics, config_status=status,
                          served_by_header=config.gateway_served_by_header,
                          operators=config.gateway_operators)
    from simulator.scenario import load_scenario, resolve_scenario

    scenario = load_scenario(resolve_scenario(scenario_name or "demo"), config=args.config)
    room = (room_server(args, scenario.config.gateway_limits)
            if getattr(args, "serve_room", None) else None)
    model = ConsoleModel(scenario.providers, lambda: 0, routes=scenario.config.routes)
    backend: LiveBackend | SimulationBackend
    if args.live or scenario.live:
        backend = LiveBackend(scenario, subscribers=(model.on_event,))
    else:
        backend = SimulationBackend(scenario, speed=args.speed, subscribers=(model.on_event,))
    model.now = backend.now_ms
    app = ConsoleApp(backend, model, operator=operator,
                     read_only=args.read_only, listen=listen, token=token, room=room)
    # started with nothing named: the picker opens over the demo (escape keeps it)
    app.pick_at_start = (scenario_name is None and args.config is None and not args.live
                         and room is None and listen is None)
    return app


def check_room(args: argparse.Namespace) -> None:
    """`--serve-room` serves a replay in virtual time only, at an address that reads."""
    from ..gateway import parse_listen

    if args.live or getattr(args, "listen", None) or (
            args.config is not None and not getattr(args, "scenario", None)):
        raise ValueError("--serve-room serves a replay in virtual time: use it with "
                         "--scenario (not --live, --listen or a --config alone)")
    parse_listen(args.serve_room)


def room_server(args: argparse.Namespace, limits: GatewayLimits) -> Any:
    """The room server for `--serve-room`, with the scenario's `gateway.limits`."""
    from ..config.token import load_token
    from ..gateway import parse_listen
    from .room import RoomServer

    host, port = parse_listen(args.serve_room)
    return RoomServer(host, port, token=load_token(getattr(args, "token_file", None)),
                      limits=limits)


def _attach_app(args: argparse.Namespace, state: dict[str, Any] | None,
                operator: str) -> object:
    from ..config.token import load_token
    from .app import ConsoleApp
    from .model.attach import AttachBackend, GatewayDown, fetch_state
    from .model.console_model import ConsoleModel

    token = load_token(args.token_file)  # a room may want none; a gateway always does
    if state is None:
        try:
            state = fetch_state(args.attach, token)
        except GatewayDown:
            state = None  # not up yet: the console opens, says it waits, and attaches
    model = ConsoleModel({}, lambda: 0)
    if state is not None:
        model.load_state_document(state)
    backend = AttachBackend(args.attach, token, on_event=model.on_event,
                            on_state=model.load_state_document, on_history=model.backfill,
                            on_note=model.note, on_run=model.new_run)
    if state is not None:
        backend.follow_room(state.get("replay"))
    model.now = backend.now_ms
    app = ConsoleApp(backend, model, operator=operator,  # type: ignore[arg-type]
                     read_only=args.read_only or backend.room is not None)
    backend.on_caller = app.token_role
    if state is not None:
        backend.read_caller(state)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.html is not None:
        from .lesson_cli import write_lesson_page

        return write_lesson_page(args)
    if args.web and not args.serve_room:
        return _serve_web(args, argv)
    try:
        _log_to_file(args)
        app = build_app(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # TokenError and AttachError read the same way
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except AttachError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    room = getattr(app, "room", None)
    if room is None:
        app.run()  # type: ignore[attr-defined]
        return 0
    print(f"serving the room on {room.url}: read-only, "
          + ("viewers need the token" if room.token else
             f"no token: anyone who can reach {room.host}:{room.port} can watch"), flush=True)
    page = _room_page(args, room.url) if args.web else None
    try:
        app.run()  # type: ignore[attr-defined]
    finally:
        if page is not None:
            page.terminate()
            page.wait(timeout=10)
    return 0


def _room_page(args: argparse.Namespace, url: str) -> Any:
    """`--serve-room` with `--web`: the browser page, each tab a console attached to the
    room (not a replay of its own), served by a child process."""
    import subprocess

    command = [sys.executable, "-m", "omniroute_tui.console", "--attach", url, "--web",
               "--host", args.host, "--port", str(args.port)]
    if args.token_file:
        command += ["--token-file", args.token_file]
    print(f"serving the room's browser page on http://{args.host}:{args.port}", flush=True)
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def web_command(argv: Sequence[str], *, writable: bool) -> list[str]:
    """The console command a browser session runs: the same options, minus the web ones,
    read-only unless `writable`."""
    cleaned: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--port", "--host"):
            skip = True
        elif arg not in ("--web", "--web-write") and not arg.startswith(("--port=", "--host=")):
            cleaned.append(arg)
    if not writable and "--read-only" not in cleaned:
        cleaned.append("--read-only")
    return [sys.executable, "-m", "omniroute_tui.console", *cleaned]


def _serve_web(args: argparse.Namespace, argv: Sequence[str] | None) -> int:
    try:
        import textual_serve.server  # noqa: F401
    except ImportError:
        print("error: --web needs textual-serve (pip install textual-serve)", file=sys.stderr)
        return 2
    import shlex
    import tempfile

    from .web import offline_templates, tab_server

    command = web_command(argv if argv is not None else sys.argv[1:],
                          writable=args.web_write)
    print(f"serving the console on http://{args.host}:{args.port} "
          f"({'operator actions allowed' if args.web_write else 'read-only'}); the page "
          "needs no internet", flush=True)
    with tempfile.TemporaryDirectory(prefix="omniroute-web-") as folder:
        tab_server(shlex.join(command), host=args.host, port=args.port,
                   title="OmniRoute Console",
                   templates_path=offline_templates(Path(folder))).serve()
    return 0
