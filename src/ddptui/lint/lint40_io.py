"""Round 40 (blind batch AD): a per-process file named by the LOCAL rank.

`f"results_{local_rank}.pkl"` gives each process of one machine its own file, but on a
multi-node run process k of every node gets the same name: on shared storage the nodes
overwrite each other's results, and whatever gathers them reads one node's (DDP-ALL-
RANKS-IO; SegmentationBLWX/sssegmentation b9628bd ssseg/train.py, fixed in 252d485 "fix
multi-machine bugs", which names the file by the global rank). Said where the name is
built, which is what the fix changes.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Final

from ddptui.lint.flow import Flow, ident
from ddptui.lint.model import Hit
from ddptui.lint.rules_io import file_writer
from ddptui.lint.rules_reach import is_local
from ddptui.lint.script import Script

# a name that sets nodes apart already (`f"{node_rank}_{local_rank}"`, the global rank)
_NODE_APART: Final = re.compile(r"node|global|host|machine|world|^rank$|\.rank$", re.I)


def _parts(s: Script, path: ast.expr, depth: int = 0) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(node, where it is written) of the path, following names assigned in the same
    function (`filename = ...` then `open(os.path.join(d, filename), "wb")`)."""
    for n in ast.walk(path):
        yield n, path
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and depth < 2:
            for v in s.assigned(s.scope_of(n), n.id):
                if s.scope_of(v) is s.scope_of(n) and v.lineno <= n.lineno:
                    yield from _parts(s, v, depth + 1)


def _in_name(s: Script, n: ast.AST, top: ast.AST) -> bool:
    """`n` makes up the text of the name (an f-string's value, a `%`/`+`/format operand),
    not a test or an index deciding something else."""
    for a in s.ancestors(n):
        if isinstance(a, ast.FormattedValue | ast.BinOp):
            return True
        if isinstance(a, ast.Call) and ast.unparse(a.func).endswith(("format", "str")):
            return True
        if a is top:
            return False
    return False


_NODES: Final = re.compile(r"node", re.I)


def _thinks_in_nodes(s: Script) -> bool:
    """The project counts processes per node or nodes (`ngpus_per_node`, `--nnodes`,
    `node_rank`): it is run on several machines, where the local rank repeats. A script
    with no such word (a one-machine feature extractor writing `r{local_rank}_...`)
    is left alone."""
    return any(
        _NODES.search(ident(n) or "") for n in s.nodes if isinstance(n, ast.Name | ast.Attribute)
    )


def local_rank_file_name(s: Script, f: Flow) -> Iterator[Hit]:
    if not f.distributed or not _thinks_in_nodes(s):
        return
    said: set[int] = set()
    for c in s.calls:
        w = file_writer(s, f, c)
        if w is None or w[1] is None:
            continue
        parts = list(_parts(s, w[1]))
        names = [(n, top) for n, top in parts if isinstance(n, ast.Name | ast.Attribute)]
        local = [
            (n, top) for n, top in names if _in_name(s, n, top) and ident(n) and is_local(s, n)
        ]
        if not local or any(
            _NODE_APART.search(ident(n) or "") and not is_local(s, n) for n, _ in names
        ):
            continue
        n, top = local[0]
        at = next((a for a in s.ancestors(top) if isinstance(a, ast.stmt)), c)
        if at.lineno in said:
            continue
        said.add(at.lineno)
        yield Hit.at(
            "DDP-ALL-RANKS-IO",
            at,
            (
                f"the file `{w[0]}` writes is named by `{ast.unparse(n)}`, the rank on this "
                f"node (line {c.lineno}): on a multi-node run process {ast.unparse(n)} of "
                "every node writes the same file"
            ),
            what=f"`{w[0]}` to a file named by the local rank `{ast.unparse(n)}`",
        )


RULES = (local_rank_file_name,)
