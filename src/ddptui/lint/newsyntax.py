"""Python 3.12's type parameters (PEP 695) read by an older interpreter: `def f[T](x):`,
`class Box[T]:` and `type Alias[T] = list[T]` are a syntax error before 3.12, yet a
project written for 3.12 is a training project like any other (blind batch AP2: five
modules of goodfire-ai/spd, its data loop among them, were "not valid Python" for ddptui
on 3.11, and their pitfalls went unseen). The parameters are blanked with spaces (lines
and columns stay where they were) and a `type` statement becomes a plain assignment; what
they declare is types only, nothing a DDP rule reads."""

from __future__ import annotations

import io
import tokenize

_OPEN = {"[": "]", "(": ")", "{": "}"}
Pos = tuple[int, int]  # tokenize's (row from 1, column)


def type_params_blanked(text: str) -> str | None:
    """`text` with PEP 695 type parameters blanked; None when it has none or cannot be
    tokenized."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    edits: list[tuple[Pos, Pos, str]] = []  # (start, end, what goes there instead)
    for i, tok in enumerate(tokens[:-2]):
        name, after = tokens[i + 1], tokens[i + 2]
        if tok.type != tokenize.NAME or name.type != tokenize.NAME:
            continue
        generic = after.type == tokenize.OP and after.string == "["
        if tok.string in ("def", "class") and generic:
            end = _closing(tokens, i + 2)
            if end is not None:
                edits.append((after.start, end, ""))
        elif tok.string == "type" and _statement_start(tokens, i) and after.string in ("=", "["):
            # `type X = v` -> `X      = v`: the keyword goes, the name takes its place
            if tok.start[0] != name.end[0]:
                continue
            width = name.end[1] - tok.start[1]
            edits.append((tok.start, name.end, name.string.ljust(width)))
            end = _closing(tokens, i + 2) if generic else None
            if end is not None:
                edits.append((after.start, end, ""))
    if not edits:
        return None
    lines = text.splitlines(keepends=True)
    for (r0, c0), (r1, c1), new in sorted(edits, reverse=True):
        for r in range(r1, r0 - 1, -1):
            line = lines[r - 1]
            a = c0 if r == r0 else 0
            b = c1 if r == r1 else len(line.rstrip("\r\n"))
            fill = new if r == r0 and new else " " * (b - a)
            lines[r - 1] = line[:a] + fill + line[b:]
    return "".join(lines)


def _closing(tokens: list[tokenize.TokenInfo], i: int) -> Pos | None:
    """The end of the bracket opened at tokens[i], nested brackets counted."""
    depth = 0
    for tok in tokens[i:]:
        if tok.type == tokenize.OP and tok.string in _OPEN:
            depth += 1
        elif tok.type == tokenize.OP and tok.string in _OPEN.values():
            depth -= 1
            if depth == 0:
                return tok.end
    return None


def _statement_start(tokens: list[tokenize.TokenInfo], i: int) -> bool:
    if i == 0:
        return True
    prev = tokens[i - 1]
    return prev.type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT) or (
        prev.type == tokenize.OP and prev.string == ";"
    )
