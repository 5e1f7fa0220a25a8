"""The glossary (`i`): every word of the engine's vocabulary the screens show is
explained, and the screen opens, scrolls and closes as help does."""

from __future__ import annotations

from omniroute_tui.console.model.glossary import GLOSSARY
from omniroute_tui.console.screens.modals import GlossaryScreen, HelpScreen
from omniroute_tui.engine.kinds import BreakerState, SkipReason
from omniroute_tui.metrics.traffic import COOLING_REASONS

from .console_helpers import console_app, screen_lines


def test_every_state_cooldown_kind_and_skip_reason_is_explained() -> None:
    terms = {term.strip() for term, _ in GLOSSARY}
    vocabulary = {*BreakerState, *SkipReason, *COOLING_REASONS, "dedup", "budget", "age",
                  "naive", "lockout", "probe"}
    assert vocabulary <= terms, sorted(vocabulary - terms)
    assert all(meaning and not meaning.endswith(".") for _, meaning in GLOSSARY)


async def test_i_opens_the_glossary_at_80x24_and_escape_closes_it() -> None:
    app, _ = console_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("i")
        assert type(app.screen) is GlossaryScreen
        assert app.screen.rows == list(GLOSSARY)
        shown = screen_lines(app)  # the top of it, at 80x24
        assert any("What the words mean" in line for line in shown)
        assert any("DEGRADED" in line and "traffic still flows" in line for line in shown)
        await pilot.press("j", "j", "k")  # scrolls, nothing behind it acts
        assert type(app.screen) is GlossaryScreen
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        assert type(app.screen) is HelpScreen
        help_rows = dict((k, v) for k, v in app.screen.rows if k)
        assert help_rows["i"].startswith("what the words mean")
