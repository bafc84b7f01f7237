"""The steps x nodes matrix widget."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding
from textual.widgets import DataTable


class ChecklistTable(DataTable[Any]):
    """The steps x nodes matrix. `enter`/`space` run the next step (a DataTable would
    take enter for itself, and its hidden binding would keep the app's out of the footer)."""

    BINDINGS = [  # noqa: RUF012 - Textual's declaration style
        Binding("enter", "app.next_step", "Next step"),
        Binding("space", "app.next_step", "Next step", show=False),
    ]
