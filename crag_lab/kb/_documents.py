"""Finding the files of a knowledge base and cutting them into line-exact chunks.

Everything here is deterministic: files are walked in sorted order, paths are relative POSIX
paths, chunk ids are hashes of (path, line range, text), and no file date or absolute path ends
up in a chunk. Files are read line by line, so a 50 MB file is chunked without ever holding it
whole.

Why not LlamaIndex's ``MarkdownNodeParser``/``SentenceSplitter``: they work on one in-memory
string, report character offsets and may cut inside a line, while evidence here must cite exact
1-based lines. The splitter below cuts only between lines, and the resulting chunks become
LlamaIndex ``TextNode`` objects in ``index.py``.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Literal, TypedDict

from crag_lab._text import encodable
from crag_lab.kb._errors import EmptyKnowledgeBaseError

TEXT_EXTENSIONS: tuple[str, ...] = (".md", ".markdown", ".txt", ".rst")
"""File types a knowledge base is made of; other files are ignored silently."""

INDEX_DIRNAME = ".crag_index"
"""Default index folder inside the knowledge-base root (hidden, so never indexed itself)."""

CHUNKER_VERSION = 1
"""Bumped whenever the splitting rules change, so that old indexes are rebuilt in full."""

_SNIFF_BYTES = 8192
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

Kind = Literal["markdown", "rst", "text"]


class LoadWarning(TypedDict):
    """A file that was skipped or only partly readable; collected in build reports, never printed."""

    event: Literal["file_skipped", "file_decoded_with_replacement"]
    path: str
    reason: str


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


@dataclass(frozen=True, slots=True)
class Documents:
    """What ``load_documents`` found: chunked files (sorted by path), all chunks and the warnings."""

    files: list[ChunkedFile]
    warnings: list[LoadWarning] = field(default_factory=list)

    @property
    def chunks(self) -> list[Chunk]:
        return [chunk for f in self.files for chunk in f.chunks]


# --- walking the folder ---------------------------------------------------------------------


def resolve_root(root: str | os.PathLike[str]) -> Path:
    """The absolute, symlink-free knowledge-base folder; raises ``FileNotFoundError`` if it is not a folder."""
    try:
        path = Path(root).expanduser().resolve()
        is_dir = path.is_dir()
    except (RuntimeError, OSError, ValueError) as exc:  # a symlink loop, a NUL byte in the name
        raise FileNotFoundError(f"knowledge-base folder {str(root)!r} cannot be opened: {_reason(exc)}") from None
    if not is_dir:
        raise FileNotFoundError(f"knowledge-base folder {str(root)!r} does not exist or is not a folder")
    return path


def is_hidden(rel_path: str) -> bool:
    """True when any component of the relative path starts with a dot."""
    return any(part.startswith(".") for part in rel_path.split("/"))


def skipped(path: str, reason: str) -> LoadWarning:
    """The warning for a file or folder left out of the knowledge base."""
    return {"event": "file_skipped", "path": _printable(path), "reason": reason}


def _printable(path: str) -> str:
    """``path`` with the undecodable bytes of a file name (held as lone surrogates) shown as U+FFFD."""
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:
        return encodable(path)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        return str(exc.strerror or exc)
    if isinstance(exc, RuntimeError):  # Path.resolve on a loop before Python 3.13
        return "symlink loop"
    return str(exc)


_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def file_type(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO", "a socket", ...)."""
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")


def skip_reason(full: Path, root: Path) -> str | None:
    """Why the entry ``full`` of ``root`` cannot be a knowledge-base file, or None if it can.

    Every oddity of a file system gets a reason instead of an exception: a symlink loop, a dangling
    symlink, a symlink leaving ``root``, a FIFO, socket, device or folder with a text extension, a
    file that cannot be examined. (A file that cannot be *read* is found out when it is opened.)
    """
    try:
        status = os.stat(full)  # follows symlinks
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.islink(full):
            return "dangling symlink: its target does not exist"
        return _reason(exc) if exc.errno == errno.ELOOP else f"unreadable: {_reason(exc)}"
    except ValueError as exc:
        return f"unreadable: {exc}"
    if os.path.islink(full) and not Path(os.path.realpath(full)).is_relative_to(root):
        return "symlink to a file outside the knowledge base"
    if not stat.S_ISREG(status.st_mode):
        return f"not a regular file ({file_type(status.st_mode)})"
    return None


def discover_files(root: Path, *, exclude: Path | None = None) -> tuple[list[str], list[LoadWarning]]:
    """Relative POSIX paths of the candidate text files under ``root``, sorted.

    Skips hidden files and folders, ``exclude`` (the index folder) and files of other types
    silently. Text-named entries that cannot be knowledge-base files (``skip_reason``: symlink
    loops, dangling symlinks, symlinks leading outside ``root``, FIFOs, sockets, devices), entries
    whose name is not valid UTF-8 and folders that cannot be listed are skipped with a warning.
    Symlinked folders are not followed. Raises ``OSError`` only when ``root`` itself cannot be listed.
    """
    try:
        excluded = exclude.resolve() if exclude is not None else None
    except (RuntimeError, OSError):
        excluded = exclude
    found: list[str] = []
    warnings: list[LoadWarning] = []
    folders: list[tuple[Path, str]] = [(root, "")]
    while folders:
        folder, prefix = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            if not prefix:
                raise OSError(exc.errno, f"cannot list knowledge-base folder {str(root)!r}: {_reason(exc)}") from None
            warnings.append(skipped(prefix.rstrip("/"), f"folder cannot be listed: {_reason(exc)}"))
            continue
        for entry in entries:
            name, rel = entry.name, prefix + entry.name
            if name.startswith("."):
                continue
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            if is_folder:
                if excluded is not None and Path(entry.path) == excluded:
                    continue
                if not _utf8(name):
                    warnings.append(skipped(rel, "folder name is not valid UTF-8"))
                    continue
                folders.append((Path(entry.path), rel + "/"))
                continue
            if not name.lower().endswith(TEXT_EXTENSIONS):
                continue
            if not _utf8(name):
                warnings.append(skipped(rel, "file name is not valid UTF-8"))
                continue
            reason = skip_reason(Path(entry.path), root)
            if reason is not None:
                warnings.append(skipped(rel, reason))
                continue
            found.append(rel)
    found.sort()
    warnings.sort(key=lambda w: w["path"])
    return found, warnings


def open_regular(path: Path) -> BinaryIO:
    """``open(path, "rb")`` that refuses, instead of blocking on, anything but a regular file.

    A FIFO opened for reading waits for a writer, forever; opening without blocking and checking
    the type of what was opened means a FIFO (or device) put in place of a file since the folder
    was listed raises ``OSError`` at once.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"not a regular file ({file_type(mode)})", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_digest(path: Path) -> tuple[str, bool]:
    """``(sha256 hex of the bytes, is_binary)``; binary means a NUL byte in the first 8 KiB."""
    digest = hashlib.sha256()
    with open_regular(path) as f:
        head = f.read(_SNIFF_BYTES)
        digest.update(head)
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest(), b"\0" in head


def is_binary(path: Path) -> bool:
    """True when the first 8 KiB of the file contain a NUL byte."""
    with open_regular(path) as f:
        return b"\0" in f.read(_SNIFF_BYTES)


# --- reading lines --------------------------------------------------------------------------


class LineReader:
    """The lines of a file as UTF-8 text without their terminators, read one at a time.

    Lines end at ``\\n`` (a trailing ``\\r`` is dropped too, and a UTF-8 byte-order mark at the
    start). A line that is not valid UTF-8 is decoded with ``errors="replace"`` and
    ``decoded_with_replacement`` becomes True. Iterating again re-reads the file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.decoded_with_replacement = False

    def __iter__(self) -> Iterator[str]:
        with open_regular(self.path) as f:
            first = True
            for raw in f:
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                if first:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                    first = False
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError:
                    self.decoded_with_replacement = True
                    yield raw.decode("utf-8", errors="replace")


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
    """Read and chunk one file of the knowledge base (``path`` relative to ``root``)."""
    full = root / path
    kind = kind_of(path)
    title = find_title(LineReader(full), kind, default=Path(path).stem)
    reader = LineReader(full)
    chunks = list(iter_chunks(path, reader, kind=kind, title=title, settings=settings))
    return ChunkedFile(path, title, chunks, reader.decoded_with_replacement)


def replacement_warning(path: str) -> LoadWarning:
    return {
        "event": "file_decoded_with_replacement",
        "path": path,
        "reason": "not valid UTF-8; undecodable bytes were replaced with U+FFFD",
    }


def binary_warning(path: str) -> LoadWarning:
    return {"event": "file_skipped", "path": path, "reason": "binary file (NUL byte in the first 8 KiB)"}


def load_documents(
    root: str | os.PathLike[str],
    *,
    settings: ChunkSettings | None = None,
    exclude: Path | None = None,
) -> Documents:
    """Walk a knowledge-base folder and chunk every usable file, without any index.

    Raises ``EmptyKnowledgeBaseError`` when no file yields a chunk.

    >>> import tempfile, pathlib
    >>> kb = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (kb / "a.md").write_text("# A\\n\\nHello.\\n")
    >>> [(c.path, c.line_start, c.line_end) for c in load_documents(kb).chunks]
    [('a.md', 1, 3)]
    """
    base = resolve_root(root)
    paths, warnings = discover_files(base, exclude=exclude if exclude is not None else base / INDEX_DIRNAME)
    files: list[ChunkedFile] = []
    for path in paths:
        try:
            if is_binary(base / path):
                warnings.append(binary_warning(path))
                continue
            chunked = chunk_file(base, path, settings)
        except OSError as exc:
            warnings.append(skipped(path, f"unreadable: {_reason(exc)}"))
            continue
        if chunked.decoded_with_replacement:
            warnings.append(replacement_warning(path))
        files.append(chunked)
    warnings.sort(key=lambda w: w["path"])
    documents = Documents(files, warnings)
    if not documents.chunks:
        raise empty_error(base)
    return documents


def check_folder(root: str | os.PathLike[str], *, exclude: Path | None = None) -> Path:
    """The resolved folder, after the checks that need no file read and no model: it exists, is a
    folder, can be listed and holds at least one candidate text file. Raises as ``load_documents`` does.
    """
    base = resolve_root(root)
    paths, _ = discover_files(base, exclude=exclude if exclude is not None else base / INDEX_DIRNAME)
    if not paths:
        raise empty_error(base)
    return base


def empty_error(root: Path) -> EmptyKnowledgeBaseError:
    """The error for a folder without any usable text."""
    return EmptyKnowledgeBaseError(
        f"knowledge base {str(root)!r} has no usable text: add non-empty {', '.join(TEXT_EXTENSIONS)} files "
        "(hidden files, binary files and the index folder are skipped)"
    )
