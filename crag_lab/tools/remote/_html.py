"""HTML to text: readable text from a web page or a Confluence storage-format fragment."""

from __future__ import annotations

import re
from html.parser import HTMLParser

_SKIP_TAGS = frozenset({"script", "style", "nav", "noscript", "template", "svg", "iframe", "ac:parameter"})
_BLOCK_TAGS = frozenset(
    {
        "p", "div", "section", "article", "main", "header", "footer", "aside", "blockquote", "ul", "ol",
        "dl", "dt", "dd", "table", "thead", "tbody", "tr", "figure", "figcaption", "hr", "br", "address",
        "details", "summary", "form", "fieldset", "body", "html", "ac:structured-macro", "ac:rich-text-body",
    }
)  # fmt: skip
_HEADINGS = {f"h{level}": "#" * level + " " for level in range(1, 7)}


class TextExtractor(HTMLParser):
    """Readable text from HTML or Confluence storage format: one line per block.

    Drops script, style, nav (and Confluence macro parameters); keeps headings (as ``# ``),
    paragraphs, list items (as ``- ``), and ``pre`` / code-macro bodies with their whitespace.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self._title: list[str] = []
        self._parts: list[str] = []
        self._prefix = ""
        self._skip = 0
        self._pre = 0
        self._code_body = 0
        self._in_title = False

    @property
    def title(self) -> str:
        return " ".join("".join(self._title).split())

    def text(self) -> str:
        self._flush()
        return "\n".join(self.blocks)

    def _flush(self, pre: bool = False) -> None:
        raw = "".join(self._parts)
        self._parts = []
        text = "\n".join(line.rstrip() for line in raw.strip("\n").splitlines()) if pre else " ".join(raw.split())
        if text.strip():
            self.blocks.append(self._prefix + text)
            self._prefix = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        if self._skip:
            return
        if tag == "title":
            self._in_title = True
        elif tag in _HEADINGS or tag == "li":
            self._flush(self._pre > 0)
            self._prefix = _HEADINGS.get(tag, "- ")
        elif tag == "pre":
            self._flush()
            self._pre += 1
        elif tag == "ac:plain-text-body":
            self._flush(self._pre > 0)
            self._code_body += 1
        elif tag in ("td", "th"):
            self._parts.append(" ")
        elif tag in _BLOCK_TAGS:
            self._flush(self._pre > 0)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
            return
        if self._skip:
            return
        if tag == "title":
            self._in_title = False
        elif tag == "pre":
            self._flush(pre=True)
            self._pre = max(0, self._pre - 1)
        elif tag == "ac:plain-text-body":
            self._flush(pre=True)
            self._code_body = max(0, self._code_body - 1)
        elif tag in _HEADINGS or tag == "li" or tag in _BLOCK_TAGS:
            self._flush(self._pre > 0)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        (self._title if self._in_title else self._parts).append(data)

    def unknown_decl(self, data: str) -> None:
        if data[:6].upper() == "CDATA[":
            self._cdata(data[6:])

    def handle_comment(self, data: str) -> None:
        # Newer Pythons report a CDATA section outside SVG/MathML as a bogus comment.
        if data[:7].upper() == "[CDATA[" and data.endswith("]]"):
            self._cdata(data[7:-2])

    def _cdata(self, text: str) -> None:
        if self._skip:
            return
        self._parts.append(text)
        if self._code_body:
            self._flush(pre=True)


def html_to_text(html: str) -> tuple[str, str]:
    """``(title, text)`` of an HTML document or a Confluence storage-format fragment."""
    try:
        parser = TextExtractor()
        parser.feed(html)
        parser.close()
    except AssertionError:
        # html.parser reports some malformed declarations ("<![<") this way; read them as text.
        parser = TextExtractor()
        parser.feed(re.sub(r"<!(?!--|doctype\b)", "&lt;!", html, flags=re.IGNORECASE))
        parser.close()
    return parser.title, parser.text()
