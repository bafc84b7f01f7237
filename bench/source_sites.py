#!/usr/bin/env python3
"""Coverage of the log knowledge base from the sources: every WARN / error / enforce site
of NCCL, gloo and torch's c10d and elastic, with its format string, and what ddptui's
diagnosis makes of a line printed from it (a specific signature, or "generic").

The sources are read from a local git mirror (or a directory of files); only the
extracted format strings are written, one TSV per project and version, under
tests/fixtures/source_sites/ (never the source files themselves):

    .venv/bin/python bench/source_sites.py extract nccl v2.21.5-1 --repo /path/to/nccl.git
    .venv/bin/python bench/source_sites.py extract gloo HEAD --repo /path/to/gloo.git
    .venv/bin/python bench/source_sites.py extract torch 2.13.0 --dir /path/to/c10d-files
    # torch's C++ c10d: the wheel's include/torch/csrc/distributed/c10d/*.h* as they are,
    # plus NAME.cpp.sites files: each .cpp's site statements transcribed verbatim (read
    # through the code index; pytorch is too large to fetch whole), each under a
    # "//@ Class::function" line that becomes the site's place
    .venv/bin/python bench/source_sites.py extract torch 2.13.0-cpp --dir /path/to/cache --commit "..."
    .venv/bin/python bench/source_sites.py remap      # refresh the mapped column
    .venv/bin/python bench/source_sites.py report     # sites covered / total per file

A site's format string is turned into a line the way the program would print it: printf
conversions and Python {fields} become a neutral value (a word for %s, 1 for numbers),
NCCL WARNs get NCCL's own prefix; the line then goes through the signatures
(classify_line) exactly as a log line would.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITES_DIR = ROOT / "tests" / "fixtures" / "source_sites"
GENERIC = "generic"

# Calls whose string arguments are what gets printed, per project.
CALLS = {
    "nccl": re.compile(r"\bWARN\s*\("),
    "gloo": re.compile(r"\b(?:GLOO_ENFORCE\w*|GLOO_THROW\w*|GLOO_ERROR_MSG|GLOO_ERROR)\s*\("),
    "torch": re.compile(
        r"\b(?:TORCH_CHECK\w*|C10_THROW_ERROR|TORCH_WARN\w*|C10D_ERROR|C10D_WARNING|"
        r"C10D_CHECK_WITH|TORCH_INTERNAL_ASSERT)\s*\(|\bLOG\((?:ERROR|WARNING|FATAL)\)\s*<<"
    ),
}
PY_CALLS = re.compile(
    r"\braise\s+\w+(?:\.\w+)*\s*\(|\blogger\.(?:error|warning|exception|critical)\s*\(|"
    r"\bwarnings\.warn\s*\("
)
C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
PRINTF = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L)?([diouxXeEfgGcsp])")
PRI_MACRO = re.compile(r'%"\s*(?:PRI\w+|SCN\w+)\s*"')
PY_STRING = re.compile(r'(?P<f>[rbfRBF]{0,2})(?P<q>"""|\'\'\'|"|\')(?P<s>.*?)(?P=q)', re.DOTALL)
PY_FIELD = re.compile(r"\{[^{}]*\}")
ADJACENT = re.compile(r'"(?:[^"\\\n]|\\.)*"(?:\s*(?:\w+\s*)?"(?:[^"\\\n]|\\.)*")*')


def _top_level_args(text: str) -> list[str]:
    """A call's arguments after the format, split at top-level commas (an unmatched
    closing bracket ends the call)."""
    return _split_top(text, ",")


def _fill_strings(fmt: str, rest: str) -> str:
    """Arguments that are string literals (or a ternary of two: the first is taken) fill
    their %s conversion; the others stay conversions."""
    args = _top_level_args(rest.lstrip().lstrip(","))
    values = []
    for a in args:
        lits = C_STRING.findall(a)
        values.append(lits[0] if lits and (a.startswith('"') or "?" in a) else None)
    out, pos = [], 0
    for k, m in enumerate(PRINTF.finditer(fmt)):
        out.append(fmt[pos : m.start()])
        v = values[k] if k < len(values) else None
        out.append(v if v is not None and m.group(1) == "s" else m.group())
        pos = m.end()
    out.append(fmt[pos:])
    return "".join(out)


# Not code that prints into a DDP job's log: tests, benchmarks, examples, and gloo's
# transports and algorithms torch does not build (CUDA, MPI, NCCL, ibverbs, redis).
SKIP_PATHS = ("/test", "benchmark", "example", "gloo/cuda", "gloo/mpi", "gloo/nccl",
              "ibverbs", "redis", "common/logging.h")


@dataclass(frozen=True)
class Site:
    where: str  # file:line
    fmt: str  # the format string as written (literals joined, escapes kept)
    mapped: str = GENERIC


def _call_text(text: str, start: int, limit: int = 2000) -> str:
    """From a call's opening parenthesis to its match (or `limit` characters)."""
    depth, i, end = 0, start, min(len(text), start + limit)
    in_str = False
    while i < end:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            in_str = c != '"'
        elif c == '"':
            in_str = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
        elif c == ";" and depth <= 1 and text[start:i].count("<<"):
            return text[start:i]
        i += 1
    return text[start:end]


_GLOO_OPS = {"EQ": "==", "NE": "!=", "LE": "<=", "LT": "<", "GE": ">=", "GT": ">"}


def _joined(args: list[str]) -> str:
    """MakeString(args...): literals as written, anything else as a {field} named by its
    expression (printed() fills it as it fills torch's)."""
    out = []
    for a in args:
        lits = C_STRING.findall(a)
        if lits and a.startswith('"'):
            out.append("".join(lits))
        else:  # a nested message call (GLOO_ERROR_MSG(...)) is its own site
            out.append("%s" if lits else _field(a))
    return "".join(out)


def gloo_sites(path: str, text: str) -> Iterator[Site]:
    """gloo prints "[enforce fail at FILE:LINE] COND. MSG" (EnforceNotMet) and
    "[FILE:LINE] MSG" (GLOO_ERROR_MSG, the IoException texts torch re-raises)."""
    for m in CALLS["gloo"].finditer(text):
        if text[max(0, m.start() - 8) : m.start()].strip().endswith("define"):
            continue
        body = _call_text(text, m.end() - 1)
        args = _top_level_args(body[1:-1] if body.endswith(")") else body[1:])
        name = m.group().split("(")[0].strip()
        line = text.count("\n", 0, m.start()) + 1
        if name.startswith("GLOO_ENFORCE"):
            op = _GLOO_OPS.get(name.rsplit("_", 1)[-1])
            if op is not None and len(args) >= 2:
                cond, msg = f"{args[0]} {op} {args[1]}", args[2:]
            elif args:
                cond, msg = args[0], args[1:]
            else:
                continue
            fmt = f"[enforce fail at {path}:%d] {' '.join(cond.split())}. {_joined(msg)}"
        else:
            fmt = f"[{path}:%d] {_joined(args)}"
        if len(re.sub(r"\{[^{}]*\}|%\w|\W", "", fmt.split("] ", 1)[1])) < 6:
            continue
        yield Site(f"{path}:{line}", fmt)


def c_sites(path: str, text: str, call: re.Pattern[str]) -> Iterator[Site]:
    for m in call.finditer(text):
        if text[max(0, m.start() - 8) : m.start()].strip().endswith("define"):
            continue  # the macro's own definition
        body = _call_text(text, m.end() - 1 if m.group().rstrip().endswith("(") else m.start())
        body = PRI_MACRO.sub("%d", body)
        pieces = C_STRING.findall(body)
        if not pieces:
            continue
        if "<<" in body:
            fmt = " ".join(pieces).strip()
        else:  # the format: the first run of adjacent literals; later literals are arguments
            run = ADJACENT.search(body)
            fmt = "".join(C_STRING.findall(run.group())) if run else pieces[0]
            fmt = _fill_strings(fmt, body[run.end() :] if run else "")
        if len(re.sub(r"%\w|\W", "", fmt)) < 6:
            continue  # no words to print ("%s", ": ")
        line = text.count("\n", 0, m.start()) + 1
        yield Site(f"{path}:{line}", fmt.replace("\t", " "))


# torch's C++ c10d: the calls that print or throw a message, and how each builds it.
# fmt-style calls take a format with {} fields; stream calls (LOG(X) << ...) and
# concat-style ones (TORCH_CHECK, c10::str, a std::string built with +) join their
# pieces: literals as written, anything else a {}.
TORCH_CPP_CALLS = re.compile(
    r"\b(?P<name>TORCH_CHECK\w*|TORCH_INTERNAL_ASSERT|TORCH_WARN\w*|C10_THROW_ERROR|"
    r"C10D_THROW_ERROR|C10D_CHECK_WITH|C10D_ERROR|C10D_WARNING|c10::str|fmt::format|"
    r"recordError|invalidArgument|SYSASSERT|throw std::runtime_error)\s*\(|"
    r"\bLOG\((?P<level>ERROR|WARNING|FATAL)\)\s*(?=<<)|\b(?P<stream>ss)\s*(?=<<)|"
    r"\b(?:std::string\s+)?(?P<var>err|msg|interpret|versionString|kBaseErrorMsg)\s*\+?=\s*(?=\")"
)
_SITE_MACROS = frozenset({"C10D_ERROR", "C10D_WARNING", "C10D_INFO", "C10D_DEBUG", "C10D_TRACE",
                          "C10D_THROW_ERROR", "C10D_CHECK_WITH"})
_FMT_STYLE = frozenset({"fmt::format", "C10D_ERROR", "C10D_WARNING", "recordError"})
# Leading arguments that are not printed: a condition, an exception type, or both.
# SYSASSERT(rv, msg) throws std::system_error, whose text is "msg: strerror(errno)".
_SYSTEM_ERROR = frozenset({"SYSASSERT"})
_SKIP_ARGS = {
    "SYSASSERT": 1,
    "TORCH_CHECK": 1,
    "TORCH_INTERNAL_ASSERT": 1,
    "TORCH_CHECK_WITH": 2,
    "C10_THROW_ERROR": 1,
    "C10D_THROW_ERROR": 1,
    "C10D_CHECK_WITH": 2,
}
# c10d's C++ exception types as Python names them (torch/csrc/distributed/c10d/exception.h:
# SocketError and TimeoutError derive from DistNetworkError, which Python shows).
_PY_EXCEPTIONS = {
    "DistStoreError": "torch.distributed.DistStoreError",
    "DistNetworkError": "torch.distributed.DistNetworkError",
    "SocketError": "torch.distributed.DistNetworkError",
    "TimeoutError": "torch.distributed.DistNetworkError",
    "DistBackendError": "torch.distributed.DistBackendError",
}
_LITERALS = re.compile(r'^\s*(?:"(?:[^"\\\n]|\\.)*"\s*)+$')
_NESTED = re.compile(r"^\s*(c10::str|fmt::format)\s*\((.*)\)\s*$", re.DOTALL)


def _split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside strings and brackets, up to an unmatched closing
    bracket."""
    out, depth, cur, i, in_str = [], 0, [], 0, False
    while i < len(text):
        c = text[i]
        if in_str:
            cur.append(c)
            if c == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur.append(c)
        elif c in "([{":
            depth += 1
            cur.append(c)
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                break
            cur.append(c)
        elif depth == 0 and text.startswith(sep, i):
            out.append("".join(cur))
            cur = []
            i += len(sep) - 1
        else:
            cur.append(c)
        i += 1
    out.append("".join(cur))
    return [a.strip() for a in out if a.strip()]


def _piece(arg: str) -> str:
    """One printed piece: literals as written, a nested c10::str/fmt::format expanded,
    a sum of pieces joined, anything else a {}."""
    if _LITERALS.match(arg):
        return "".join(C_STRING.findall(arg))
    lits = C_STRING.findall(arg)
    if lits and "?" in arg and ":" in arg:
        return str(lits[0])  # a ternary of literals: the first is taken (as _fill_strings does)
    nested = _NESTED.match(arg)
    if nested:
        return _message(nested.group(1), _top_level_args(nested.group(2)))
    parts = _split_top(arg, "+")
    if len(parts) > 1:
        return "".join(_piece(p) for p in parts)
    return _field(arg)


def _field(expr: str) -> str:
    """A value printed into a message, named by its expression ({rank_}, {port_}) so
    that printed() can choose a neutral value for it as for a Python {field}."""
    expr = " ".join(expr.replace("{", "(").replace("}", ")").split())
    return "{" + expr + "}"


def _message(name: str, args: list[str]) -> str:
    skip = _SKIP_ARGS.get(name, 1 if name.startswith("TORCH_CHECK_") else 0)  # _VALUE, _INDEX, ...
    args = args[skip:]
    if name in _FMT_STYLE:
        if not args:
            return ""
        values = iter(args[1:])
        return re.sub(r"\{\}", lambda _: _piece(next(values, "")), _piece(args[0]))
    text = "".join(_piece(a) for a in args)
    return text + ": {strerror(errno)}" if name in _SYSTEM_ERROR else text


def torch_cpp_sites(path: str, text: str) -> Iterator[Site]:
    """Sites of torch's C++ c10d.  `path` ending in .sites is a transcription of a
    source file's site statements, each under a `//@ function` line: the site's place
    is the source file and that function (line numbers were not transcribed)."""
    transcribed = path.endswith(".sites")
    source = path.removesuffix(".sites")
    # The definitions of the site macros themselves are not sites.
    defined = [
        (d.start(), d.end())
        for d in re.finditer(r"^[ \t]*#define[ \t]+(\w+)(?:[^\n]*\\\n)*[^\n]*", text, re.MULTILINE)
        if d.group(1) in _SITE_MACROS
    ]
    text = re.sub(r"\\(?=[ \t]*\n)", " ", text)  # a macro's line continuations (places kept)
    end = 0
    for m in TORCH_CPP_CALLS.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        inside = any(a <= m.start() < b for a, b in defined)
        if m.start() < end or inside or text[line_start : m.start()].lstrip().startswith("#define"):
            continue  # inside the previous site (a c10::str in a C10_THROW_ERROR), or a macro's definition
        if m.group("level") or m.group("var") or m.group("stream"):
            stop = text.find(";", m.end())
            stop = len(text) if stop < 0 else stop
            body = text[m.end() : stop]
            streamed = m.group("level") or m.group("stream")
            pieces = _split_top(body.lstrip().removeprefix("<<"), "<<") if streamed else [body]
            fmt = "".join(_piece(p) for p in pieces)
            end = stop
        else:
            body = _call_text(text, m.end() - 1)
            end = m.start() + len(body) + (m.end() - 1 - m.start())
            inner = body[1:-1] if body.endswith(")") else body[1:]
            args = _top_level_args(inner)
            fmt = _message(m.group("name"), args)
            # A throw reaches the log as Python prints it: torch's exception class, then the message.
            kind = args[0] if len(args) > 1 else ""
            if m.group("name") in _SKIP_ARGS and kind in _PY_EXCEPTIONS:
                fmt = f"{_PY_EXCEPTIONS[kind]}: {fmt}"
        if len(re.sub(r"\{[^{}]*\}|\\n|\W", "", fmt)) < 6:
            continue
        if transcribed:
            funcs = re.findall(r"^//@ (\S+)", text[: m.start()], re.MULTILINE)
            where = f"{source}:{funcs[-1] if funcs else '?'}"
            owner = funcs[-1].split("::")[-2] if funcs and "::" in funcs[-1] else ""
            fmt = re.sub(r"\{\(?\*this\)?\}", "{*" + owner + "}", fmt) if owner else fmt
        else:
            where = f"{path}:{text.count(chr(10), 0, m.start()) + 1}"
        yield Site(where, fmt.replace("\t", " "))


def py_sites(path: str, text: str) -> Iterator[Site]:
    for m in PY_CALLS.finditer(text):
        body = text[m.end() : m.end() + 1500]
        depth, end = 1, 0
        for i, c in enumerate(body):
            depth += (c == "(") - (c == ")")
            if depth == 0:
                end = i
                break
        args = body[:end]
        pieces = [s["s"] for s in PY_STRING.finditer(args)]
        if not pieces:
            continue
        fmt = "".join(pieces).replace("\n", " ").strip()
        if len(re.sub(r"\{[^}]*\}|%\w|\W", "", fmt)) < 6:
            continue
        line = text.count("\n", 0, m.start()) + 1
        yield Site(f"{path}:{line}", re.sub(r"\s+", " ", fmt))


_NUMERIC_FIELD = re.compile(
    r"rank|size|port|count|world|num|timeout|len|code|seq|pid|nodes|elapsed|Millis|MilSec|InSec|"
    r"\br\b|errno|retry",
    re.I,
)


# What torch's C++ prints for some values (operator<< / fmt formatters in the same
# sources): the log prefix, a WorkNCCL, a socket and a socket address.
_CPP_VALUES = (
    (re.compile(r"logPrefix\(\)"), "[PG ID 0 PG GUID 0 Rank 0] "),
    (re.compile(r"^\{\*(?:WorkNCCL|ProcessGroupNCCL)\}$"),
     "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)"),
    (re.compile(r"^\{\*(?:SocketImpl|Socket)\}$|^\{\*socket_?\}$"),
     "SocketImpl(fd=1, addr=[node0]:29500, remote=[node1]:29500)"),
    (re.compile(r"^\{\*?addr\}$"), "[node1]:29500"),
    (re.compile(r"^\{(?:\S*\.)?host_?\}$"), "node1"),
    # gloo: a peer's or listener's address (Address::str(), "[ip]:port")
    (re.compile(r"^\{\S*(?:peer|self_|address|addr_|remote|local)\S*\.str\(\)\}$|^\{peer_?\}$"), "[10.0.0.2]:41234"),
    (re.compile(r"^\{data\.(?:local|remote)\}$"), "[10.0.0.2]:41234"),
    (re.compile(r"strerror|what\(\)|gai_err|err_name"), "X"),  # an error's text: a word, not a number
    (re.compile(r"connect_timeout\(\)"), "15000ms"),  # a std::chrono duration: fmt prints its unit
)


def _field_value(m: re.Match[str]) -> str:
    """A Python {field}: a number when its name says so (rank, size, port ...), else a word."""
    if m.group().endswith("=}"):  # f"{x=}" prints "x=<value>"
        name = m.group()[1:-2]
        return f"{name}={'1' if _NUMERIC_FIELD.search(name) else 'X'}"
    for pattern, value in _CPP_VALUES:
        if pattern.search(m.group()):
            return value
    return "1" if _NUMERIC_FIELD.search(m.group()) else "X"


def printed(project: str, fmt: str) -> str:
    """The line a site prints, placeholders filled with neutral values."""
    s = fmt.replace("\\n", " ").replace('\\"', '"').replace("\\t", " ").replace("%%", "%")
    s = re.sub(r"=%s(?!\()", "=1", s)  # "rank=%s": a number in practice ("status=%s(%d)": a name)
    s = PRINTF.sub(lambda m: "X" if m.group(1) in "sc" else "0x1" if m.group(1) == "p" else "1", s)
    s = PY_FIELD.sub(_field_value, s)
    s = s.strip()
    if project == "nccl":
        return f"host:1:1 [0] file.cc:1 NCCL WARN {s}"
    return s


# A signature that catches a whole family generically (every gloo enforce, any failed
# syscall, torch's wrapper around any NCCL error) names no cause: such a site is known but
# generic ("generic:ID").
CATCH_ALL_SPECIFICITY = 20


def classify(project: str, fmt: str) -> str:
    from ddptui.diagnosis.signatures import classify_line

    m = classify_line(printed(project, fmt))
    if m is None:
        return GENERIC
    sig = m.signature
    if sig.secondary or sig.specificity < CATCH_ALL_SPECIFICITY:
        return f"{GENERIC}:{sig.id}"
    return sig.id


def sources_from_git(repo: str, rev: str, under: Iterable[str]) -> Iterator[tuple[str, str]]:
    names = subprocess.run(
        ["git", "--git-dir", repo, "ls-tree", "-r", "--name-only", rev, "--", *under],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for name in names:
        if name.endswith((".cc", ".cu", ".c", ".h", ".cpp", ".hpp", ".py")):
            blob = subprocess.run(
                ["git", "--git-dir", repo, "show", f"{rev}:{name}"],
                capture_output=True, check=True,
            ).stdout  # fmt: skip
            yield name, blob.decode("utf-8", errors="replace")


def sources_from_dir(directory: str) -> Iterator[tuple[str, str]]:
    base = Path(directory)
    for p in sorted(base.rglob("*")):
        if p.suffix in (".cc", ".cpp", ".hpp", ".h", ".py", ".sites") and p.is_file():
            yield p.relative_to(base).as_posix(), p.read_text(encoding="utf-8", errors="replace")


def extract(project: str, files: Iterable[tuple[str, str]]) -> list[Site]:
    out = []
    for path, text in files:
        if any(part in path for part in SKIP_PATHS) or path.startswith("test"):
            continue
        if path.endswith(".py"):
            found = py_sites(path, text)
        elif project == "torch":
            found = torch_cpp_sites(path, text)
        elif project == "gloo":
            found = gloo_sites(path, text)
        else:
            found = c_sites(path, text, CALLS[project])
        out += [Site(s.where, s.fmt, classify(project, s.fmt)) for s in found]
    return out


HEADER = "# project\tversion\tcommit: {project}\t{version}\t{commit}\n# where\tformat\tmapped\n"


def write(project: str, version: str, commit: str, sites: list[Site]) -> Path:
    SITES_DIR.mkdir(parents=True, exist_ok=True)
    path = SITES_DIR / f"{project}-{version}.tsv"
    rows = [f"{s.where}\t{s.fmt}\t{s.mapped}" for s in sites]
    path.write_text(HEADER.format(project=project, version=version, commit=commit) + "\n".join(rows) + "\n")
    return path


def read(path: Path) -> tuple[dict[str, str], list[Site]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    meta = dict(zip(("project", "version", "commit"), lines[0].split(": ", 1)[1].split("\t"), strict=True))
    sites = []
    for row in lines[2:]:
        where, fmt, mapped = row.split("\t")
        sites.append(Site(where, fmt, mapped))
    return meta, sites


def coverage(sites: list[Site]) -> tuple[int, int]:
    return sum(not s.mapped.startswith(GENERIC) for s in sites), len(sites)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument("project", choices=sorted(CALLS))
    ex.add_argument("version")
    ex.add_argument("--repo", help="a git directory (bare mirror)")
    ex.add_argument("--rev", help="git revision (default: the version)")
    ex.add_argument("--dir", help="a directory of source files instead of git")
    ex.add_argument("--commit", default="", help="the commit the --dir files are from")
    ex.add_argument("--under", nargs="*", default=["src", "gloo", "torch"])
    sub.add_parser("remap")
    sub.add_parser("report")
    args = ap.parse_args()
    if args.cmd == "extract":
        if args.repo:
            rev = args.rev or args.version
            commit = subprocess.run(
                ["git", "--git-dir", args.repo, "rev-parse", rev], capture_output=True, text=True, check=True
            ).stdout.strip()
            files: Iterable[tuple[str, str]] = sources_from_git(args.repo, rev, args.under)
        else:
            commit, files = args.commit, sources_from_dir(args.dir)
        print(write(args.project, args.version, commit, extract(args.project, files)))
        return 0
    for path in sorted(SITES_DIR.glob("*.tsv")):
        meta, sites = read(path)
        if args.cmd == "remap":
            sites = [Site(s.where, s.fmt, classify(meta["project"], s.fmt)) for s in sites]
            write(meta["project"], meta["version"], meta["commit"], sites)
        covered, total = coverage(sites)
        print(f"{meta['project']} {meta['version']}: {covered}/{total} sites map to a specific entry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
