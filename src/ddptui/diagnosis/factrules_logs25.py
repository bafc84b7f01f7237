"""Round logs25 (issue 15, blind batch Q): LOGS-UNRECOGNIZED says what the log shows.

An honest unknown is one of three things, and its words, its severity and the exit code
must agree (CONTRACT.md: LOGS-UNRECOGNIZED on a failing log exits 1):
- `failure`: failure lines (factrules.yaml failure_lines.hard) no known cause explains:
  an error, exit 1, "The log shows a failure";
- `warning`: only lines that look like warnings or errors (failure_lines.soft: a logger's
  ERROR level, NCCL's WARN, a traceback header) and no program's failure: a warning, exit
  0, "The log shows no failure line, only warnings";
- `plain` (logs33): nothing else at all, only lines that say a failure in plain words
  (failure_lines.plain: "not responding", "Invalid ...", "Unable to ...") in a program's
  own line no signature knows: a warning, exit 0, "The log shows no known failure";
- a fact rule (a log that stops in a step it started, nccl-tests' summary printed once per
  process, c10d's slow reverse lookups): no failure line at all, the rule's own words.
Before this round all three read "The log shows a failure (no error line(s))".

Core layer, stdlib only."""

from __future__ import annotations

from typing import Final

FAILURE: Final = "failure"
WARNING: Final = "warning"
PLAIN: Final = "plain"


def unknown_words(kind: str, count: int) -> dict[str, str]:
    """The {shows}, {kind} and {act} of LOGS-UNRECOGNIZED's cause (kb/logfacts.yaml) for
    unknown failure lines (kind FAILURE), unknown warning lines only (kind WARNING) or
    failure words only (kind PLAIN)."""
    if kind == PLAIN:
        return {
            "shows": (
                f"no known failure, but {count} line(s) that say one in plain words (a "
                "program's own message no known cause matches); read them: one may be why "
                "the run stopped"
            ),
            "kind": "such",
            "act": "say one",
        }
    if kind == FAILURE:
        return {
            "shows": f"a failure that matches no known cause ({count} line(s) that look like errors)",
            "kind": "failure",
            "act": "fail",
        }
    return {
        "shows": (
            f"no failure line, only {count} line(s) that look like warnings or errors and "
            "match no known cause (a logger's ERROR level, a library's WARN, a traceback "
            "header); nothing in it says a program stopped"
        ),
        "kind": "such",
        "act": "warn",
    }


def fact_words(shows: str, act: str = "show it") -> dict[str, str]:
    """The same for a fact rule's LOGS-UNRECOGNIZED: no failure line, what the rule read."""
    return {"shows": f"no failure line, but {shows}", "kind": "failure", "act": act}
