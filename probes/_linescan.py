# Filtering a log on the node (shared with logread; stdlib only).
#
# The login node's diagnosis (ddptui/logs/scan.py) reads a file in chunks, splits each
# chunk into lines, and looks closer only at a line its prefilter admits (one of a few
# hundred short "trigger" strings in the line's first max_line bytes); for such a line it
# also reads up to `lookback` lines above it in the same chunk (the time of a line that
# has none, the traceback above an error), and torch's bare "Last error:" line takes the
# next line with it.  Every other line is only counted.  So the node runs the same
# prefilter (its two compiled patterns come in PARAMS) on the same chunks and sends only
# the blocks of lines the login node will look at, each with its first line number: the
# login node's diagnosis of these blocks is the diagnosis of the whole file.
#
# chunk_blocks() mirrors scan._chunk_lines exactly (tests/test_sharedfs_filter.py holds
# the two side by side); hit_lines() is Prefilter.hit on every line of a block, each
# distinct line (digits made 0) searched once, all of a block's new ones in one pass.


def chunk_blocks(chunks, long_line, max_line):
    """The complete lines of each chunk as one bytes block (lines joined by b"\\n"), the
    last unterminated line at the end; a line longer than long_line keeps its first
    max_line bytes (scan._chunk_lines, joined)."""
    carry = b""
    skipping = False
    for piece in chunks:
        chunk = piece
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk, skipping = chunk[nl:], False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            if len(carry) > long_line:
                carry, skipping = carry[:max_line], True
            continue
        carry = data[cut + 1 :]
        yield data[:cut]
    if carry:
        yield carry


def _hits_of(pattern, text, max_line, found):
    """Add the start offsets of the lines of `text` that hold a match of `pattern` in
    their first max_line bytes."""
    pos, end = 0, len(text)
    while pos <= end:
        m = pattern.search(text, pos)
        if m is None:
            return
        start = text.rfind(b"\n", 0, m.start()) + 1
        stop = text.find(b"\n", m.start())
        stop = end if stop < 0 else stop
        if m.end() <= start + max_line or pattern.search(text, start, min(stop, start + max_line)):
            found.add(start)
        pos = stop + 1


ZERO = bytes.maketrans(b"123456789", b"000000000")
KEEP = 100000  # verdicts kept per kind; forgotten (and found again) beyond


def _line_hit(line, pats, max_line):
    """Prefilter.hit: a trigger in the line's first max_line bytes."""
    head = line[:max_line]
    if pats["exact"] is not None and pats["exact"].search(head):
        return True
    return bool(pats["folded"] is not None and pats["folded"].search(head.lower()))


def hit_lines(block, pats, max_line, seen=None):
    """[(index, start offset)] of the block's lines the prefilter admits, in order.
    Like the login node's reader (scan.from_blocks, prefilter.KeyScan), a verdict is
    kept under the line with its digits made 0: the triggers without digits are in the
    line exactly when they are in that key; a key that holds a trigger with digits made
    0 ("[00:00<?", "via P0P") sends its lines to the full check.  `seen` is the
    (admitted, passed, maybe) sets of keys, kept from block to block; the keys not seen
    before are searched all at once, in one pass per pattern.  `pats`: the compiled
    patterns of the probe's filter (exact, folded, plain_*, digits_*)."""
    yes, no, maybe = seen if seen is not None else (set(), set(), set())
    keys = block.translate(ZERO).split(b"\n")
    new = set(keys)
    new -= yes
    new -= no
    new -= maybe
    if new:
        if len(no) + len(new) > KEEP or len(yes) + len(maybe) > KEEP:
            yes.clear()
            no.clear()
            maybe.clear()
        new = list(new)
        joined = b"\n".join(new)
        low = joined.lower()
        plain, digits = set(), set()
        for name, text, found in (("plain_exact", joined, plain), ("plain_folded", low, plain),
                                  ("digits_exact", joined, digits), ("digits_folded", low, digits)):
            if pats[name] is not None:
                _hits_of(pats[name], text, max_line, found)
        pos = 0
        for key in new:
            (yes if pos in plain else maybe if pos in digits else no).add(key)
            pos += len(key) + 1
    present = yes.intersection(keys)
    check = maybe.intersection(keys)
    out, pos = [], 0
    if present or check:
        for i, key in enumerate(keys):
            if key in present or (
                key in check and _line_hit(block[pos : pos + len(key)], pats, max_line)
            ):
                out.append((i, pos))
            pos += len(key) + 1
    return out


JOINS = (b"Last error:", b"enforce fail at")  # scan.joins_next's lines hold one of these
# logs35: an NCCL WARN a paste wrapped may go on for up to WARN_WRAP lines that hold no
# trigger (ddptui.logs.warnwrap: the login node decides which continue it)
WARN = b" NCCL WARN "
WARN_WRAP = 3


def cut_at_width(line):
    """scan.cut_at_width on bytes: a line a terminal cut at its width ends in the single
    space it was cut at; the login node joins the next line to it (logs31)."""
    if line[-1:] == b"\r":
        line = line[:-1]
    return line[-1:] == b" " and line[-2:-1] not in (b" ", b"") and len(line) > 40


def wanted(block, hits, lookback):
    """[(first line, byte start, byte end)] of the block to send: each hit with up to
    lookback lines above it, and the lines after one that may join the next (one; an NCCL
    WARN's WARN_WRAP) (merged where they touch); and how many of the next block's first
    lines are wanted too (a joining line ends this block)."""
    ranges, spill, stop_of = [], 0, -1
    for h, start in hits:
        end = block.find(b"\n", start)
        end = len(block) if end < 0 else end
        stop = h + 1
        line = block[start:end]
        follow = WARN_WRAP if WARN in line else 1 if any(j in line for j in JOINS) or cut_at_width(line) else 0
        for i in range(follow):
            if end >= len(block):
                spill = max(spill, follow - i)  # the next block's first lines
                break
            nxt = block.find(b"\n", end + 1)
            end = len(block) if nxt < 0 else nxt
            stop += 1
        first, begin = h, start
        while first > 0 and first > h - lookback:
            if ranges and first <= stop_of:
                break
            begin = block.rfind(b"\n", 0, begin - 1) + 1
            first -= 1
        if ranges and first <= stop_of:
            ranges[-1] = (ranges[-1][0], ranges[-1][1], max(ranges[-1][2], end))
            stop_of = max(stop_of, stop)
        else:
            ranges.append((first, begin, end))
            stop_of = stop
    return ranges, spill


def with_lines(block, ranges, lo, hi):
    """`ranges` (wanted()'s) with the block's lines lo..hi-1 added, merged where they touch
    (the login node reads a file's first and last lines whole: scan._Edges, logs33)."""
    if hi <= lo:
        return ranges
    begin = 0
    for _ in range(lo):
        begin = block.find(b"\n", begin) + 1
    end = begin
    for _ in range(hi - lo):
        nl = block.find(b"\n", end)
        end = len(block) if nl < 0 else nl + 1
    end = end - 1 if end > begin and block[end - 1 : end] == b"\n" else end
    out = []
    for first, b, e in sorted([*ranges, (lo, begin, end)], key=lambda r: r[1]):
        if out and b <= out[-1][2] + 1:
            out[-1] = (out[-1][0], out[-1][1], max(out[-1][2], e))
        else:
            out.append((first, b, e))
    return out


class HeldBack:
    """A file's blocks held back until `span` lines follow them (the file's last `span`
    lines may be in them), its first `span` lines added to the first blocks' ranges and
    its last to the held ones' at the end (logs33: the login node reads both whole)."""

    def __init__(self, span):
        self.span = span
        self.items = []  # (first line, block, lines, ranges)

    def push(self, at, block, lines, ranges):
        """The items to send now, this block held."""
        if at < self.span:
            ranges = with_lines(block, ranges, 0, min(lines, self.span - at))
        self.items.append((at, block, lines, ranges))
        out = []
        while self.items and at + lines - (self.items[0][0] + self.items[0][2]) >= self.span:
            out.append(self.items.pop(0))
        return out

    def finish(self, last):
        """The held items with the file's last `span` lines (it ended at line `last`)."""
        out = [(at, b, n, with_lines(b, r, max(0, last - self.span - at), n))
               for at, b, n, r in self.items]
        self.items = []
        return out
