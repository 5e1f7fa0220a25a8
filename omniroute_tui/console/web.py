"""The console in a browser (`--web`), for training rooms: textual-serve's page, with its
one outside fetch (a font stylesheet from a public font service) replaced by the same font
served by the console itself, so the page works with no internet."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["offline_templates"]

_FONT_LINK = re.compile(
    r'<link\s+rel="stylesheet"\s+href="https://fonts\.googleapis\.com/[^"]*"\s*/>')
_LOCAL_FONT = """<style>
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf");
      }
    </style>"""


def offline_templates(folder: Path) -> Path:
    """Write textual-serve's page template into `folder` with the font served locally;
    returns the folder, for `Server(templates_path=...)`.

    Raises RuntimeError if the page no longer has the link this replaces (a textual-serve
    upgrade): better refused at start than a page that quietly fetches from outside.
    """
    import textual_serve

    package = Path(textual_serve.__file__).parent
    page = (package / "templates" / "app_index.html").read_text()
    page, replaced = _FONT_LINK.subn(_LOCAL_FONT, page)
    if replaced != 1 or "https://" in page.replace("http://www.w3.org/2000/svg", ""):
        raise RuntimeError("textual-serve's page changed: cannot make it work offline")
    if not (package / "static" / "fonts" / "RobotoMono-VariableFont_wght.ttf").exists():
        raise RuntimeError("textual-serve no longer ships the Roboto Mono font")
    (folder / "app_index.html").write_text(page)
    return folder
