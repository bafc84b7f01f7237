# Probe: read log files on this node for `ddptui diagnose --config CONFIG NODE:GLOB`.
# Read-only: files are only opened for reading, never written, moved or locked.
# Size-bounded: at most the last max_bytes of each file (a cut line is dropped), at
# most max_files files.  Every line is redacted here, before it leaves the node.
# params: {"globs": [str], "max_bytes": int, "max_files": int, "salt": str}
# records: file {path, size, offset, truncated, gzip}, lines {path, text},
#          file_error {path, error}, nomatch {glob}, done {files}
import glob
import gzip
import os

BATCH_CHARS = 256 * 1024
SNIFF = 64 * 1024
MAX_LINE_CHARS = 8192


def expand(pattern):
    found = sorted(glob.glob(os.path.expanduser(pattern)))
    return [p for p in found if os.path.isfile(p)]


CONTROL = bytes(list(range(0, 9)) + list(range(14, 27)) + list(range(28, 32)))


def binary_head(head):
    """NUL bytes or control bytes no text log holds (the login side's rule too)."""
    if not head:
        return False
    control = len(head) - len(head.translate(None, CONTROL))
    return head.count(b"\0") > len(head) // 100 or control > len(head) // 20


def encoding_of(head):
    text = head.decode("utf-8", "replace")
    bad = text.count("\ufffd")
    return "latin-1" if bad and bad > len(text) // 50 else "utf-8"


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
        left = max_bytes - len(head) if info["gzip"] else None
        emit("file", path=path, truncated=bool(info["offset"]), **info)
        pending = head
        batch, chars = [], 0
        while True:
            if left is not None and left <= 0:
                break
            try:
                data = fh.read(1 << 20)
            except (OSError, EOFError) as exc:
                emit("file_error", path=path, error="read stopped: %s" % exc)
                data = b""
            if left is not None:
                left -= len(data)
            pending += data
            if not data:
                lines, pending = ([pending] if pending else []), b""
            else:
                cut = pending.rfind(b"\n")
                if cut < 0:
                    continue
                lines, pending = pending[:cut].split(b"\n"), pending[cut + 1 :]
            for raw in lines:
                line = raw.decode(encoding, "replace").rstrip("\r")[:MAX_LINE_CHARS]
                line = redact_text(line, known, salt)
                batch.append(line)
                chars += len(line) + 1
                if chars >= BATCH_CHARS:
                    emit("lines", path=path, text="\n".join(batch))
                    batch, chars = [], 0
            if not data:
                break
        if batch:
            emit("lines", path=path, text="\n".join(batch))
    return True


def main():
    globs = list(PARAMS.get("globs") or [])
    max_bytes = int(PARAMS.get("max_bytes", 64 << 20))
    max_files = int(PARAMS.get("max_files", 256))
    salt = str(PARAMS.get("salt", ""))
    known = secret_values(dict(os.environ))
    sent = 0
    seen = set()
    for pattern in globs:
        paths = [p for p in expand(pattern) if p not in seen]
        if not paths:
            emit("nomatch", glob=pattern)
        for path in paths:
            seen.add(path)
            if sent >= max_files:
                emit("file_error", path=path, error="more than %d files: not read" % max_files)
                continue
            if send_file(path, max_bytes, known, salt):
                sent += 1
    emit("done", files=sent)


main()
