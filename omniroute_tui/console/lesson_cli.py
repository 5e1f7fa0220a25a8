"""`omniroute-tui --lesson NAME [--html FILE]`: a guided lesson in the console, or its
page for self-study."""

from __future__ import annotations

import argparse
import sys

from ..config import ConfigError

__all__ = ["lesson_app", "write_lesson_page"]


def lesson_app(args: argparse.Namespace, operator: str) -> object:
    """The console on the lesson's scenario, paced at `--speed`, with its steps; with
    `--serve-room`, served to a room whose viewers follow its steps."""
    from simulator.lesson import load_lesson, resolve_lesson

    from .cli import check_room, room_server
    from .lesson_app import LessonApp
    from .model.console_model import ConsoleModel
    from .model.lesson_progress import LessonBackend

    for option in ("config", "live", "listen", "db"):
        if getattr(args, option, None):
            raise ValueError(f"--lesson replays a shipped scenario in virtual time: it takes "
                             f"no --{option}")
    if getattr(args, "serve_room", None):
        check_room(args)
    lesson = load_lesson(resolve_lesson(args.lesson))
    room = (room_server(args, lesson.scenario.config.gateway_limits)
            if getattr(args, "serve_room", None) else None)
    model = ConsoleModel(lesson.scenario.providers, lambda: 0,
                         routes=lesson.scenario.config.routes)
    backend = LessonBackend(lesson, speed=args.speed, subscribers=(model.on_event,))
    model.now = backend.now_ms
    return LessonApp(backend, model, operator=operator, read_only=args.read_only, room=room)


def write_lesson_page(args: argparse.Namespace) -> int:
    """`--lesson NAME --html FILE`: run the lesson's scenario and write its page."""
    from simulator.lesson import load_lesson, resolve_lesson
    from simulator.lesson_html import write_lesson_html

    if not getattr(args, "lesson", None):
        print("error: --html FILE writes a lesson's page: give --lesson NAME too",
              file=sys.stderr)
        return 2
    try:
        lesson = load_lesson(resolve_lesson(args.lesson))
        size = write_lesson_html(args.html, lesson)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {args.html}: {exc.strerror}", file=sys.stderr)
        return 2
    print(f"lesson page: {args.html} ({size:,} bytes)")
    return 0
