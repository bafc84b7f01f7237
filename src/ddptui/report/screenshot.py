"""The TUI's screenshot (Textual's exported SVG) made safe to inline in the HTML report."""

from __future__ import annotations

import re

SVG_START = re.compile(r"<svg\b", re.IGNORECASE)
DROP_BLOCKS = re.compile(
    r"<\?xml.*?\?>|<!DOCTYPE[^>]*>|<!--.*?-->|<script\b.*?</script\s*>"
    r"|<foreignObject\b.*?</foreignObject\s*>",
    re.IGNORECASE | re.DOTALL,
)
STYLE_BLOCK = re.compile(r"(<style\b[^>]*>)(.*?)(</style\s*>)", re.IGNORECASE | re.DOTALL)
TAG = re.compile(r"<[^>]+>")
EVENT_ATTR = re.compile(r"\s+on[a-z]+\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s>]+)", re.IGNORECASE)
OUTSIDE_HREF = re.compile(r"\s+(?:xlink:)?href\s*=\s*(\"(?!#)[^\"]*\"|'(?!#)[^']*')", re.IGNORECASE)
OUTSIDE_URL = re.compile(r"url\(\s*(?![\"']?\s*#)[^)]*\)", re.IGNORECASE)
FONT_SRC = re.compile(r"\bsrc\s*:\s*([^;}]*)(;?)", re.IGNORECASE)


def clean_screenshot(svg: str) -> str:
    """Textual's exported SVG, made safe to inline: no prolog, comments or scripts, and
    no reference outside the document. Its @font-face rules keep only their local()
    fonts (the monospace fallback looks the same); other outside url()s become none."""
    start = SVG_START.search(svg)
    end = svg.lower().rfind("</svg>")
    if start is None or end < start.start():
        return ""
    body = DROP_BLOCKS.sub("", svg[start.start() : end + len("</svg>")])
    body = STYLE_BLOCK.sub(_clean_style, body)
    return TAG.sub(_clean_tag, body)


def _clean_style(m: re.Match[str]) -> str:
    css = re.sub(r"@import[^;]*;?", "", m.group(2), flags=re.IGNORECASE)
    css = FONT_SRC.sub(_local_fonts, css)
    return m.group(1) + OUTSIDE_URL.sub("none", css) + m.group(3)


def _local_fonts(m: re.Match[str]) -> str:
    kept = [p.strip() for p in m.group(1).split(",") if p.strip().lower().startswith("local(")]
    return f"src: {', '.join(kept)}{m.group(2)}" if kept else ""


def _clean_tag(m: re.Match[str]) -> str:
    tag = EVENT_ATTR.sub("", m.group(0))
    return OUTSIDE_URL.sub("none", OUTSIDE_HREF.sub("", tag))
