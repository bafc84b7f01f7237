# Probe: read log files on this node for `ddptui diagnose --config CONFIG NODE:GLOB`.
# Read-only: files are only opened for reading, never written, moved or locked.
# Size-bounded: at most the last max_bytes of each file (a cut line is dropped), at
# most max_files files.  Every line is redacted here, before it leaves the node: a batch
# of lines at once (no redaction rule matches across a line end, and a line start reads
# as a word start to every look-behind, so this is the same as line by line, and faster).
# Two modes, so that a file every node sees (a shared filesystem) is read once:
#   "survey": say what each glob matches and what identifies each file (_fileid.py),
#             read nothing else;
#   "read":   read exactly `paths` (the files the login node assigned to this node);
#             with a "filter" (the login node's prefilter, _linescan.py) only the blocks
#             of lines its diagnosis looks at are sent (`seg` records), and each file's
#             bytes and lines are counted here (file_end).
# Without a mode: expand the globs and read what they match (one pass).
# params: {"globs": [str], "mode": "survey"|"read", "paths": [str], "expect": {path: ino},
#          "max_bytes": int, "max_files": int, "salt": str, "deadline_s": float,
#          "filter": {"exact": str|None, "folded": str|None, "plain_exact", "plain_folded",
#                     "digits_exact", "digits_folded": str|None, "all": bool, "max_line": int,
#                     "long_line": int, "lookback": int, "sniff": int, "chunk": int}}
# records: host {hostname, boot}, done {files, read_bytes, cpu_s}, seen {path, <identity>}, file {path, size, offset,
#          truncated, gzip}, lines {path, text}, seg {path, first, text, more},
#          file_end {path, ino, size_now, grew, replaced, bytes, lines, last},
#          file_error {path, error}, nomatch {glob}, done {files}
import errno
import glob
import gzip
import os
import re
import socket
import time

BATCH_CHARS = 256 * 1024
SNIFF = 64 * 1024
MAX_LINE_CHARS = 8192


def expand(pattern):
    """(regular files, [(path, why not)]) the glob matches; directories are skipped
    quietly (a glob like DIR/* matches them), everything else odd is said."""
    files, odd = [], []
    for p in sorted(glob.glob(os.path.expanduser(pattern))):
        try:
            os.stat(p)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                odd.append((p, "a symlink loop: not read"))
            elif os.path.islink(p):
                odd.append((p, "a dangling symlink: not read"))
            else:
                odd.append((p, exc.strerror or str(exc)))
            continue
        if os.path.isdir(p):
            continue
        if not os.path.isfile(p):
            odd.append((p, "not a regular file (a pipe, socket or device): not read"))
            continue
        files.append(p)
    return files, odd


CONTROL = bytes(list(range(0, 9)) + list(range(14, 27)) + list(range(28, 32)))


def binary_head(head):
    """NUL bytes or control bytes no text log holds (the login side's rule too)."""
    if not head:
        return False
    control = len(head) - len(head.translate(None, CONTROL))
    return head.count(b"\0") > len(head) // 100 or control > len(head) // 20


def encoding_of(head):
    """The login side's rule (ddptui/logs/reader.py sniff): Latin-1 when more than 2% of
    the head's characters are bytes UTF-8 cannot decode."""
    text = head.decode("utf-8", "replace")
    bad = text.count("\ufffd") - head.decode("utf-8", "ignore").count("\ufffd")
    return "latin-1" if bad and bad / max(len(text), 1) > 0.02 else "utf-8"


def open_bounded(path, max_bytes):
    """(binary file positioned at the first whole line of the last max_bytes, info)."""
    size = os.path.getsize(path)
    with open(path, "rb") as probe_fh:
        magic = probe_fh.read(2)
    if magic == b"\x1f\x8b":
        # A compressed file cannot be read from its end: the first max_bytes instead.
        return gzip.open(path, "rb"), {"size": size, "offset": 0, "gzip": True}
    fh = open(path, "rb")  # noqa: SIM115 - the caller closes it
    offset = max(0, size - max_bytes)
    if offset:
        fh.seek(offset - 1)
        if fh.read(1) != b"\n":
            fh.readline()  # the cut line: dropped, never half a line (or half a secret)
        offset = fh.tell()
    return fh, {"size": size, "offset": offset, "gzip": False}


TRAILING_CR = re.compile(r"\r+$", re.M)


def send_lines(path, block, encoding, known, salt):
    """Whole lines (bytes, no final newline) as `lines` records of about BATCH_CHARS,
    each line cut to MAX_LINE_CHARS and every one redacted (a batch at a time)."""
    text = block.decode(encoding, "replace")
    if "\r" in text:
        text = TRAILING_CR.sub("", text)
    lines = text.split("\n")
    if max(map(len, lines)) > MAX_LINE_CHARS:
        text = "\n".join(line[:MAX_LINE_CHARS] for line in lines)
    start = 0
    while start <= len(text):
        end = text.find("\n", start + BATCH_CHARS)
        end = len(text) if end < 0 else end
        emit("lines", path=path, text=redact_text(text[start:end], known, salt))
        start = end + 1


def send_file(path, max_bytes, known, salt):
    try:
        fh, info = open_bounded(path, max_bytes)
    except OSError as exc:
        emit("file_error", path=path, error=exc.strerror or str(exc))
        return False
    with fh:
        try:
            head = fh.read(SNIFF)
        except (OSError, EOFError) as exc:
            emit("file_error", path=path, error=str(exc))
            return False
        if binary_head(head):
            emit("file_error", path=path, error="binary data, not a text log")
            return False
        encoding = encoding_of(head)
        # A live log keeps growing: read up to its size when it was opened (bounded
        # time; what it writes meanwhile is said by the caller, not chased).
        left = max_bytes - len(head) if info["gzip"] else info["size"] - info["offset"] - len(head)
        emit("file", path=path, truncated=bool(info["offset"]), **info)
        pending = head
        while True:
            data = b""
            if left > 0:
                try:
                    data = fh.read(min(1 << 20, left))
                except (OSError, EOFError) as exc:
                    emit("file_error", path=path, error="read stopped: %s" % exc)
                left -= len(data)
            pending += data
            if not data:
                block, pending = pending, b""
                if block.endswith(b"\n"):
                    block = block[:-1]  # the file's last line end: no empty line after it
            else:
                cut = pending.rfind(b"\n")
                if cut < 0:
                    continue
                block, pending = pending[:cut], pending[cut + 1 :]
            if block or data:  # a cut block may be one empty line; the end only if text
                send_lines(path, block, encoding, known, salt)
            if not data:
                break
    return True


SEG_CHARS = 256 * 1024  # a block longer than this goes in several `seg` records


def send_segment(path, first, raw, encoding, known, salt):
    """Lines of one block (raw bytes, no final newline) as `seg` records from line
    `first`: redacted, cut into pieces of about SEG_CHARS at line ends; every piece but
    the last says more=True (the login node joins them back into one block)."""
    text = raw.decode(encoding, "replace")
    redacted = redact_text(text, known, salt)
    if redacted.count("\n") != text.count("\n"):  # never seen: then line by line
        redacted = "\n".join(redact_text(x, known, salt) for x in text.split("\n"))
    start = 0
    while True:
        end = redacted.find("\n", start + SEG_CHARS) if len(redacted) - start > SEG_CHARS else -1
        piece = redacted[start:] if end < 0 else redacted[start:end]
        emit("seg", path=path, first=first, text=piece, more=end >= 0)
        if end < 0:
            return
        first += piece.count("\n") + 1
        start = end + 1


def send_filtered(path, max_bytes, known, salt, flt):
    """The file read in the login node's chunks (SNIFF, then 1 MiB), only the blocks of
    lines its diagnosis looks at sent (_linescan.py), and what it read counted: the
    file_end record carries bytes and lines as the login node would have counted them."""
    try:
        fh, info = open_bounded(path, max_bytes)
    except OSError as exc:
        emit("file_error", path=path, error=exc.strerror or str(exc))
        return None
    size = int(flt.get("chunk", 1 << 20))
    with fh:
        try:
            head = fh.read(int(flt.get("sniff", SNIFF)))
        except (OSError, EOFError) as exc:
            emit("file_error", path=path, error=str(exc))
            return None
        if binary_head(head):
            emit("file_error", path=path, error="binary data, not a text log")
            return None
        encoding = encoding_of(head)
        left = max_bytes - len(head) if info["gzip"] else info["size"] - info["offset"] - len(head)
        emit("file", path=path, truncated=bool(info["offset"]), **info)
        counted = {"bytes": 0, "lines": 0}

        def chunks():
            nonlocal left
            data = head
            while data:
                counted["bytes"] += len(data)
                counted["lines"] += data.count(b"\n")
                yield data
                if left <= 0:
                    return
                try:
                    data = fh.read(min(size, left))
                except (OSError, EOFError) as exc:
                    emit("file_error", path=path, error="read stopped: %s" % exc)
                    return
                left -= len(data)

        pats = {
            name: re.compile(flt[name].encode("utf-8")) if flt.get(name) else None
            for name in ("exact", "folded", "plain_exact", "plain_folded", "digits_exact",
                         "digits_folded")
        }
        max_line, lookback = int(flt["max_line"]), int(flt["lookback"])
        held = HeldBack(int(flt.get("span", 0)))  # logs33: a file's first and last lines
        lineno, spill, seen = 0, 0, (set(), set(), set())

        def send(items):
            for at, block, _, ranges in items:
                for first, begin, end in ranges:
                    send_segment(path, at + first, block[begin:end], encoding, known, salt)

        for block in chunk_blocks(chunks(), int(flt["long_line"]), max_line):
            if flt.get("all"):
                ranges, after = [(0, 0, len(block))], 0
            else:
                hits = hit_lines(block, pats, max_line, seen)
                ranges, after = wanted(block, hits, lookback)
            if spill:  # the lines a joining line at the last block's end wants
                ranges = with_lines(block, ranges, 0, spill)
            lines = block.count(b"\n") + 1
            send(held.push(lineno, block, lines, ranges))
            spill = after
            lineno += lines
        send(held.finish(lineno))
    counted["last"] = lineno  # the file's lines as the reader splits them (its end marker)
    return counted


def matched(globs, max_files):
    """The files the globs match, each once, at most max_files (one note for the rest)."""
    out, seen, extra = [], set(), 0
    for pattern in globs:
        files, odd = expand(pattern)
        files = [p for p in files if p not in seen]
        for path, why in odd:
            emit("file_error", path=path, error=why)
        if not files and not odd:
            emit("nomatch", glob=pattern)
        for path in files:
            seen.add(path)
            if len(out) >= max_files:
                extra += 1
                continue
            out.append(path)
    if extra:
        emit(
            "file_error",
            path=", ".join(globs),
            error="%d more files match: not read (at most %d per node; narrow the glob)"
            % (extra, max_files),
        )
    return out


def survey(paths, deadline):
    for n, path in enumerate(paths):
        if time.monotonic() > deadline:
            emit(
                "file_error",
                path=path,
                error="looking at the files took too long: this and %d more not read"
                % (len(paths) - n - 1),
            )
            return
        try:
            emit("seen", path=path, **identity(path))
        except OSError as exc:
            why = "a symlink loop: not read" if exc.errno == errno.ELOOP else exc.strerror
            emit("file_error", path=path, error=why or str(exc))


def read_assigned(paths, expect, max_bytes, known, salt, flt=None):
    sent = 0
    for path in paths:
        try:
            before = os.stat(path)
        except OSError as exc:
            emit("file_error", path=path, error="gone before it was read: %s" % (exc.strerror or exc))
            continue
        counted = None
        if flt is not None:
            counted = send_filtered(path, max_bytes, known, salt, flt)
            done = counted is not None
        else:
            done = send_file(path, max_bytes, known, salt)
        if done:
            sent += 1
            try:
                after = os.stat(path)
            except OSError:
                after = before
            want = expect.get(path)
            emit(
                "file_end",
                path=path,
                ino=before.st_ino,
                size_now=after.st_size,
                grew=after.st_size - before.st_size,
                replaced=bool(want is not None and int(want) != before.st_ino)
                or after.st_ino != before.st_ino,
                **(counted or {}),
            )
    return sent


def read_bytes():
    """What this process read so far (rchar of /proc/self/io), None where unknown."""
    for line in (read_text("/proc/self/io") or "").splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return None


def main():
    globs = list(PARAMS.get("globs") or [])
    mode = PARAMS.get("mode")
    max_bytes = int(PARAMS.get("max_bytes", 64 << 20))
    max_files = int(PARAMS.get("max_files", 256))
    salt = str(PARAMS.get("salt", ""))
    if mode == "survey":
        emit("host", hostname=socket.gethostname(), boot=boot_id())
        deadline = time.monotonic() + float(PARAMS.get("deadline_s", 60.0))
        paths = matched(globs, max_files)
        survey(paths, deadline)
        emit("done", files=len(paths), read_bytes=read_bytes())
        return
    known = secret_values(dict(os.environ))
    if mode == "read":
        paths = [str(p) for p in PARAMS.get("paths") or []][:max_files]
        sent = read_assigned(
            paths, dict(PARAMS.get("expect") or {}), max_bytes, known, salt, PARAMS.get("filter")
        )
        t = os.times()
        emit("done", files=sent, read_bytes=read_bytes(), cpu_s=round(t[0] + t[1], 3))
        return
    sent = 0
    for path in matched(globs, max_files):
        if send_file(path, max_bytes, known, salt):
            sent += 1
    emit("done", files=sent)


main()
