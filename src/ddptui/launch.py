"""The `ddptui` command. `ddptui [CONFIG]` in a terminal opens the TUI without loading the
command-line machinery or the config validator first: the first frame comes before
click, pydantic and the YAML parser are imported. Everything else goes to ddptui.cli."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddptui.config import ClusterConfig

# The subcommands of ddptui.cli.main (a test keeps the two in step).
COMMANDS = frozenset(
    {"open", "check", "validate", "schema", "report", "replay", "job", "lint", "diagnose"}
)


def wants_tui(argv: list[str]) -> bool:
    """`ddptui` or `ddptui CONFIG`, in a terminal."""
    if len(argv) > 1 or (argv and (argv[0] in COMMANDS or argv[0].startswith("-"))):
        return False
    return sys.stdin.isatty() and sys.stdout.isatty()


ALT_SCREEN_ON, ALT_SCREEN_OFF = "\x1b[?1049h", "\x1b[?1049l"


def splash(source: str, columns: int) -> str:
    """The first frame, in plain ANSI, drawn before Textual is even imported: the header
    and the checklist's rows where the app will draw them, on the alternate screen that
    Textual then takes over (entering it again changes nothing) and paints over whole."""
    from ddptui.stepmeta import ORDER

    lines = [f" ddptui · loading {source} …", " step       status"]
    lines += [f" {step:<10} \x1b[2m·\x1b[22m" for step in ORDER]
    body = "\r\n".join(line[: max(1, columns)] for line in lines)
    return f"{ALT_SCREEN_ON}\x1b[?25l\x1b[H\x1b[2J{body}"


def open_tui(config: str | None) -> int:
    import shutil

    source = config or "<embedded demo>"
    sys.stdout.write(splash(source, shutil.get_terminal_size().columns))
    sys.stdout.flush()
    try:
        from ddptui.ui.app import DdptuiApp
    except BaseException:
        sys.stdout.write(f"\x1b[?25h{ALT_SCREEN_OFF}")  # give the terminal back as it was
        sys.stdout.flush()
        raise

    def load() -> ClusterConfig:  # after the first frame: pydantic and YAML load here
        from ddptui.demo import config_or_demo

        return config_or_demo(config)

    app = DdptuiApp(None, source, load=load)
    try:
        code = app.run()
    except Exception:  # noqa: BLE001 - last resort: a bug in ddptui is exit 3, not a traceback
        from ddptui.cli.common import internal_error

        return internal_error()
    if app.config_error is not None:
        from ddptui.cli.common import report_load_error

        return report_load_error(app.config_error)
    return code or 0


def main() -> None:
    argv = sys.argv[1:]
    if wants_tui(argv):
        sys.exit(open_tui(argv[0] if argv else None))
    from ddptui.cli import main as cli_main

    cli_main()
