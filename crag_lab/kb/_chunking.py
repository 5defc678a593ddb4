"""Cutting a file into line-exact chunks: headings, sections and size limits.

Everything here is deterministic: chunk ids are hashes of (path, line range, text), and no file
date or absolute path ends up in a chunk.

Why not LlamaIndex's ``MarkdownNodeParser``/``SentenceSplitter``: they work on one in-memory
string, report character offsets and may cut inside a line, while evidence here must cite exact
1-based lines. The splitter below cuts only between lines, and the resulting chunks become
LlamaIndex ``TextNode`` objects in ``_store.py``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from crag_lab.kb._files import LineReader

CHUNKER_VERSION = 1
"""Bumped whenever the splitting rules change, so that old indexes are rebuilt in full."""

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

Kind = Literal["markdown", "rst", "text"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """A run of whole lines of one file: the unit that is embedded, retrieved and cited.

    ``text`` is exactly lines ``line_start``..``line_end`` (1-based, inclusive) of ``path``
    joined by ``"\\n"``; ``title`` is the file's title plus the heading path of the section.
    """

    id: str
    path: str
    text: str
    line_start: int
    line_end: int
    title: str


@dataclass(frozen=True)
class ChunkSettings:
    """How files are cut. Stored in the index manifest: a change triggers a full rebuild.

    Token counts are estimates (words and punctuation marks). A chunk is closed at the first
    blank line after ``target_tokens`` and before any line that would take it past ``max_tokens``
    (all-MiniLM-L6-v2 reads at most 256 word pieces); a chunk closed inside a paragraph repeats up
    to ``overlap_tokens`` of its last lines at the start of the next one.

    >>> ChunkSettings(target_tokens=120).as_dict()["max_tokens"]
    256
    """

    target_tokens: int = 180
    max_tokens: int = 256
    overlap_tokens: int = 32

    def __post_init__(self) -> None:
        if not 0 < self.target_tokens <= self.max_tokens:
            raise ValueError(
                f"ChunkSettings needs 0 < target_tokens <= max_tokens, got "
                f"target_tokens={self.target_tokens}, max_tokens={self.max_tokens}"
            )
        if not 0 <= self.overlap_tokens < self.target_tokens:
            raise ValueError(
                f"ChunkSettings needs 0 <= overlap_tokens < target_tokens, got "
                f"overlap_tokens={self.overlap_tokens}, target_tokens={self.target_tokens}"
            )

    def as_dict(self) -> dict[str, Any]:
        """The settings plus the splitter version, as recorded in the manifest."""
        return {"chunker_version": CHUNKER_VERSION, **asdict(self)}


@dataclass(frozen=True, slots=True)
class ChunkedFile:
    """The chunks of one file, its title, and whether undecodable bytes had to be replaced."""

    path: str
    title: str
    chunks: list[Chunk]
    decoded_with_replacement: bool


def kind_of(path: str) -> Kind:
    """Which heading syntax applies to a file, from its extension."""
    suffix = path.lower().rsplit(".", 1)[-1]
    if suffix in ("md", "markdown"):
        return "markdown"
    if suffix == "rst":
        return "rst"
    return "text"


def count_tokens(text: str) -> int:
    """A cheap, deterministic token estimate: words plus punctuation marks (at least 1 a line)."""
    return max(1, len(_TOKEN_RE.findall(text)))


# --- headings -------------------------------------------------------------------------------

_ATX_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_NOT_PARAGRAPH_RE = re.compile(r"^ {0,3}(?:[-*+>|]|\d+[.)])(?:\s|$)")
_RST_ADORNMENT_RE = re.compile(r"""^([!-/:-@\[-`{-~])\1+[ \t]*$""")


@dataclass(frozen=True, slots=True)
class _Heading:
    level: int
    text: str
    first_line: int  # the title line of a setext/rst heading (or its overline) precedes the current one


class _HeadingScanner:
    """Fed one line at a time, reports the headings of a Markdown or reStructuredText file.

    Markdown: ATX (``## Title``) and setext (``Title`` over ``===``/``---``) headings, ignoring
    fenced code blocks and a leading YAML front matter. reStructuredText: a title underlined (and
    optionally overlined) with one punctuation character; levels in order of first appearance.
    Plain text has no headings.
    """

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self._prev: str | None = None
        self._prev_plain = False  # the previous line could be a setext/rst title
        self._prevprev: str | None = None
        self._fence: tuple[str, int] | None = None
        self._front_matter = False
        self._rst_styles: list[tuple[str, bool]] = []

    def feed(self, lineno: int, line: str) -> _Heading | None:
        if self.kind == "markdown":
            heading, plain = self._markdown(lineno, line)
        elif self.kind == "rst":
            heading, plain = self._rst(lineno, line)
        else:
            heading, plain = None, False
        self._prevprev, self._prev = self._prev, line
        self._prev_plain = plain and heading is None
        return heading

    def _title_line_before(self) -> bool:
        prevprev_blank = self._prevprev is None or not self._prevprev.strip()
        return self._prev_plain and self._prev is not None and prevprev_blank

    def _markdown(self, lineno: int, line: str) -> tuple[_Heading | None, bool]:
        stripped = line.strip()
        if lineno == 1 and stripped == "---":
            self._front_matter = True
            return None, False
        if self._front_matter:
            if stripped in ("---", "..."):
                self._front_matter = False
            return None, False
        fence = _FENCE_RE.match(line)
        if self._fence is not None:
            char, size = self._fence
            if fence and fence.group(1)[0] == char and len(fence.group(1)) >= size and not fence.group(2).strip():
                self._fence = None
            return None, False
        if fence and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
            self._fence = (fence.group(1)[0], len(fence.group(1)))
            return None, False
        atx = _ATX_RE.match(line)
        if atx:
            text = (atx.group(2) or "").strip()
            return (_Heading(len(atx.group(1)), text, lineno) if text else None), False
        setext = _SETEXT_RE.match(line)
        if setext and self._title_line_before():
            assert self._prev is not None
            level = 1 if setext.group(1)[0] == "=" else 2
            return _Heading(level, self._prev.strip(), lineno - 1), False
        plain = bool(stripped) and not line.startswith(("    ", "\t")) and not _NOT_PARAGRAPH_RE.match(line)
        return None, plain

    def _rst(self, lineno: int, line: str) -> tuple[_Heading | None, bool]:
        adornment = _RST_ADORNMENT_RE.match(line)
        if adornment and self._prev is not None and self._prev_plain:
            title = self._prev.strip()
            overline = self._prevprev is not None and self._prevprev.rstrip() == line.rstrip()
            prevprev_blank = self._prevprev is None or not self._prevprev.strip()
            if len(line.rstrip()) >= min(len(title), 3) and (overline or prevprev_blank):
                style = (adornment.group(1), overline)
                if style not in self._rst_styles:
                    self._rst_styles.append(style)
                level = self._rst_styles.index(style) + 1
                return _Heading(level, title, lineno - (2 if overline else 1)), False
        plain = bool(line.strip()) and not adornment and not line[:1].isspace()
        return None, plain


def find_title(lines: Iterable[str], kind: Kind, default: str) -> str:
    """The file's first top-level heading (Markdown H1, first reST title), else ``default``.

    Stops reading at that heading, so this is cheap for the usual file that starts with one.
    """
    scanner = _HeadingScanner(kind)
    if kind == "text":
        return default
    for lineno, line in enumerate(lines, 1):
        heading = scanner.feed(lineno, line)
        if heading is not None and heading.level == 1:
            return heading.text
    return default


# --- splitting ------------------------------------------------------------------------------

Role = Literal["blank", "body", "heading", "overlap"]


@dataclass(frozen=True, slots=True)
class _Line:
    no: int
    text: str
    tokens: int
    role: Role


def chunk_id(path: str, line_start: int, line_end: int, text: str) -> str:
    """Deterministic id of a chunk: sha1 of its path, line range and text."""
    key = f"{path}\0{line_start}\0{line_end}\0{text}"
    return hashlib.sha1(key.encode("utf-8")).hexdigest()


def _title(doc_title: str, stack: list[tuple[int, str]]) -> str:
    headings = [text for _, text in stack]
    if stack and stack[0][0] == 1 and stack[0][1] == doc_title:
        headings = headings[1:]
    return " > ".join([doc_title, *headings])


def _has_new(buf: list[_Line]) -> bool:
    return any(line.role in ("body", "heading") for line in buf)


class _Splitter:
    """Accumulates lines of one file and cuts them into chunks (see ``iter_chunks``)."""

    def __init__(self, path: str, doc_title: str, settings: ChunkSettings) -> None:
        self.path = path
        self.doc_title = doc_title
        self.settings = settings
        self.stack: list[tuple[int, str]] = []
        self.buf: list[_Line] = []
        self.tokens = 0

    def _reset(self, lines: list[_Line]) -> None:
        self.buf = lines
        self.tokens = sum(line.tokens for line in lines)

    def emit(self, overlap: bool = False) -> Iterator[Chunk]:
        """Yield the buffer as a chunk (if it holds anything new) and start a new buffer."""
        lines = self.buf
        carry: list[_Line] = []
        if overlap:
            budget = self.settings.overlap_tokens
            for line in reversed(lines[1:]):
                if line.role == "blank" or line.tokens > budget:
                    break
                budget -= line.tokens
                carry.insert(0, replace(line, role="overlap"))
        self._reset(carry)
        if not _has_new(lines):
            return
        start = next(i for i, line in enumerate(lines) if line.role != "blank")
        end = max(i for i, line in enumerate(lines) if line.role != "blank")
        kept = lines[start : end + 1]
        text = "\n".join(line.text for line in kept)
        first, last = kept[0].no, kept[-1].no
        title = _title(self.doc_title, self.stack)
        yield Chunk(chunk_id(self.path, first, last, text), self.path, text, first, last, title)

    def heading(self, heading: _Heading, line: _Line) -> Iterator[Chunk]:
        """A new section starts: close the previous one unless it holds nothing but headings."""
        moved = [replace(x, role="heading") for x in self.buf if x.no >= heading.first_line]
        rest = [x for x in self.buf if x.no < heading.first_line]
        self._reset(rest)
        if any(x.role == "body" for x in rest):
            yield from self.emit()
        else:  # a heading directly followed by a sub-heading: keep both in the next chunk
            self._reset([x for x in rest if x.role != "overlap"])
        self.stack = [h for h in self.stack if h[0] < heading.level] + [(heading.level, heading.text)]
        self._reset([*self.buf, *moved, replace(line, role="heading")])
        if self.tokens > self.settings.max_tokens:
            yield from self.emit()

    def line(self, line: _Line) -> Iterator[Chunk]:
        if line.role == "blank":
            if not _has_new(self.buf):  # nothing new since the last cut: drop overlap and blanks
                self._reset([])
                return
            self.buf.append(line)
            self.tokens += line.tokens
            if self.tokens >= self.settings.target_tokens:
                yield from self.emit()
            return
        if self.tokens + line.tokens > self.settings.max_tokens and _has_new(self.buf):
            yield from self.emit(overlap=True)
        self.buf.append(line)
        self.tokens += line.tokens


def iter_chunks(
    path: str,
    lines: Iterable[str],
    *,
    kind: Kind,
    title: str,
    settings: ChunkSettings | None = None,
) -> Iterator[Chunk]:
    """Cut the lines of one file into chunks, lazily: one section of lines in memory at a time.

    A new chunk starts at every heading (a heading followed directly by a sub-heading stays with
    it), and inside a section whenever the size limits of ``settings`` say so; chunks never
    start or end with blank lines and never cut a line.

    >>> lines = ["# Guide", "", "Intro.", "", "## Install", "", "pip install x"]
    >>> [(c.line_start, c.line_end, c.title) for c in iter_chunks("g.md", lines, kind="markdown", title="Guide")]
    [(1, 3, 'Guide'), (5, 7, 'Guide > Install')]
    """
    splitter = _Splitter(path, title, settings or ChunkSettings())
    scanner = _HeadingScanner(kind)
    for lineno, text in enumerate(lines, 1):
        heading = scanner.feed(lineno, text)
        tokens = count_tokens(text)
        if heading is not None:
            yield from splitter.heading(heading, _Line(lineno, text, tokens, "heading"))
        else:
            yield from splitter.line(_Line(lineno, text, tokens, "body" if text.strip() else "blank"))
    yield from splitter.emit()


def chunk_file(root: Path, path: str, settings: ChunkSettings | None = None) -> ChunkedFile:
    """Read and chunk one file of the knowledge base (``path`` relative to ``root``, which is resolved).

    A file that is a symlink out of ``root`` when it is opened raises ``OSError`` (`open_inside`).
    """
    full = root / path
    kind = kind_of(path)
    title = find_title(LineReader(full, root), kind, default=Path(path).stem)
    reader = LineReader(full, root)
    chunks = list(iter_chunks(path, reader, kind=kind, title=title, settings=settings))
    return ChunkedFile(path, title, chunks, reader.decoded_with_replacement)
