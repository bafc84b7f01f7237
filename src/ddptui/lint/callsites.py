"""Which calls reach a function (`Script.call_sites`), answered from one inverted table
once it is safe to build. Pure core: the `ast` module only.

Why the table waits: `Script.callees` marks a call as reaching nothing while it is being
resolved (its cycle guard), and resolving a call may ask the call sites of a function
(a parameter's arguments). A scan made then sees the guarded call as reaching nothing;
its answer is kept, as it always was, but a table built from it would be wrong for
every later question. So only a scan begun with no call under resolution builds the
table: it resolves every call, and their callees are final from then on."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from ddptui.lint.project import FuncNode


class CallSites:
    """The memo and the table of one script."""

    def __init__(self) -> None:
        self.memo: dict[FuncNode, tuple[ast.Call, ...]] = {}
        self.callers: dict[FuncNode, list[ast.Call]] | None = None
        self.resolving = 0  # calls whose callees are being resolved now (guard active)

    def of(
        self,
        func: FuncNode,
        calls: Sequence[ast.Call],
        callees: Callable[[ast.Call], tuple[FuncNode, ...]],
    ) -> tuple[ast.Call, ...]:
        """The calls among `calls` (in their order) whose callees hold `func`."""
        found = self.memo.get(func)
        if found is None:
            found = self.memo[func] = self._find(func, calls, callees)
        return found

    def _find(
        self,
        func: FuncNode,
        calls: Sequence[ast.Call],
        callees: Callable[[ast.Call], tuple[FuncNode, ...]],
    ) -> tuple[ast.Call, ...]:
        if self.callers is not None:
            return tuple(self.callers.get(func, ()))
        outermost = self.resolving == 0
        found = tuple(c for c in calls if func in callees(c))
        if outermost:  # every call was resolved by the scan and none is under way
            self.callers = self.build(calls, callees)
        return found

    @staticmethod
    def build(
        calls: Sequence[ast.Call], callees: Callable[[ast.Call], tuple[FuncNode, ...]]
    ) -> dict[FuncNode, list[ast.Call]] | None:
        """Every function's callers, in the order of `calls` (each call once)."""
        table: dict[FuncNode, list[ast.Call]] = {}
        for c in calls:
            for fn in dict.fromkeys(callees(c)):
                table.setdefault(fn, []).append(c)
        return table
