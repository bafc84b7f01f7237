"""The data model of the rules over log facts (factrules.yaml, loaded by factrules.py):
interface classes, rules, stalls and the whole rule set.  Its own module so that the
rules' context (factcontext.py) and their loader (factrules.py) both import it and not
each other.  Core layer, stdlib only (and the signature type the failure lines become)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Final

from ddptui.diagnosis.finding import Severity
from ddptui.diagnosis.signatures import Signature

UNRECOGNIZED: Final = "LOGS-UNRECOGNIZED"
APP_EXCEPTION: Final = "LOGS-APP-EXCEPTION"  # logs39: a rank's own Python exception
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class IfaceClass:
    name: str
    prefixes: tuple[str, ...]
    networks: tuple[Net, ...]

    def holds(self, iface: str, addr: str) -> bool:
        if any(iface.startswith(p) for p in self.prefixes):
            return True
        ip = ip_of(addr)
        return ip is not None and any(ip.version == n.version and ip in n for n in self.networks)


@dataclass(frozen=True)
class FactRule:
    id: str
    when: str
    param: str | None  # class, aspect or fact
    needs: tuple[str, ...]
    severity: Severity


@dataclass(frozen=True)
class FactRules:
    classes: tuple[IfaceClass, ...]
    rules: tuple[FactRule, ...]
    hard: tuple[re.Pattern[str], ...]
    soft: tuple[re.Pattern[str], ...]
    not_clean: tuple[str, ...] = ()
    benign: re.Pattern[str] | None = None  # failure-looking lines healthy runs print
    wrappers: frozenset[str] = frozenset()  # ids that only say a failure happened elsewhere
    run_ended: re.Pattern[str] | None = None  # a line saying the training loop ended
    hints: tuple[tuple[str, re.Pattern[str]], ...] = ()  # (name, pattern): facts.yaml hints
    stalls: tuple[Stall, ...] = ()
    # logs33: failure words in any program's line, read on each source's first and last
    # lines only (logs/scan.py) and only when nothing else was found
    plain: tuple[re.Pattern[str], ...] = ()

    def iface_class(self, iface: str, addr: str) -> str | None:
        """The first class (in file order) the interface belongs to."""
        return next((c.name for c in self.classes if c.holds(iface, addr)), None)

    def is_of(self, name: str, iface: str, addr: str) -> bool:
        return any(c.name == name and c.holds(iface, addr) for c in self.classes)

    def failure_signatures(self) -> tuple[Signature, ...]:
        """The failure lines as signatures of the lowest specificity (any real signature
        on the same line wins), so the prefilter derives their triggers like any other."""
        out = []
        for kind, pats in (("hard", self.hard), ("soft", self.soft)):
            for i, rx in enumerate(pats):
                out.append(
                    Signature(
                        f"{UNRECOGNIZED}#{kind}{i}",
                        "unrecognized failure line",
                        "env",
                        "launch",
                        "error" if kind == "hard" else "warning",
                        rx,
                        0,
                        True,
                        "-",
                        "-",
                        "-",
                        "field",
                        self.benign,  # logs26: the hard lines' noise too
                    )
                )
        return tuple(out)


def ip_of(addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(addr.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Stall:
    """A step whose start, among the last lines of a log with no line saying it finished,
    means the job stopped there (factrules.yaml `stalls`; logs/stalls.py watches)."""

    what: str  # "Lightning's process registration"
    start: re.Pattern[str]
    done: re.Pattern[str] | None  # the line that says it finished (None: any later output)
    first_step: bool  # the first collective or benchmark step, after init finished
    header: int = 0  # lines the step's own header prints after its start; more: it went on
    # logs17: the line each process prints right before the start, nothing that can wait
    # between (NCCL's commAlloc "Using network IB" before "Init START"), its process in the
    # named group `proc`: a process that printed it and never the start is a log that holds
    # none of that process's next lines (cut or filtered), not a job that stopped there
    precedes: re.Pattern[str] | None = None
