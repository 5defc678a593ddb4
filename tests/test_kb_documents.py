"""Loading and chunking a knowledge-base folder (crag_lab/kb/_documents.py, _files.py, _chunking.py)."""

from __future__ import annotations

import itertools
import os
import tracemalloc
from pathlib import Path

import pytest

from crag_lab.kb import Chunk, ChunkSettings, EmptyKnowledgeBaseError, load_documents
from crag_lab.kb._chunking import count_tokens, iter_chunks
from crag_lab.kb._files import LineReader, discover_files

GUIDE = """\
# Deployment Guide

This guide explains how to deploy the gateway.

## Prerequisites

You need Python 3.11 and a running Redis.

### Ports

The gateway listens on port 8443.

```bash
# not a heading: a shell comment
./deploy.sh --port 8443
```

## Rollback

Run `./rollback.sh` to go back.
"""


def file_lines(root: Path, rel: str) -> list[str]:
    return (root / rel).read_text(encoding="utf-8").split("\n")


def assert_exact(root: Path, chunk: Chunk) -> None:
    """The chunk's text is exactly its lines of the file."""
    lines = file_lines(root, chunk.path)
    assert chunk.text == "\n".join(lines[chunk.line_start - 1 : chunk.line_end])


def test_walks_sorted_relative_posix_paths_and_skips_hidden_and_index(make_kb) -> None:
    root = make_kb(
        {
            "b.md": "# B\nbee\n",
            "a/z.txt": "zed\n",
            "a/y.rst": "Why\n===\n\nbody\n",
            "a/x.markdown": "# X\nx\n",
            ".hidden.md": "# secret\n",
            ".git/notes.md": "# git\n",
            ".crag_index/old.md": "# stale index content\n",
            "image.png": b"\x89PNG\r\n\x1a\n",
            "notes.py": "print('not a kb file')\n",
        }
    )
    paths, warnings = discover_files(root, exclude=root / ".crag_index")
    assert paths == ["a/x.markdown", "a/y.rst", "a/z.txt", "b.md"]
    assert warnings == []
    docs = load_documents(root)
    assert [f.path for f in docs.files] == paths
    assert docs.warnings == []


def test_a_custom_index_folder_inside_the_root_is_not_indexed(make_kb) -> None:
    root = make_kb({"a.md": "# A\ntext\n", "index/x.md": "# X\nindex files\n"})
    assert {c.path for c in load_documents(root, exclude=root / "index").chunks} == {"a.md"}


def test_symlink_to_a_file_outside_the_root_is_skipped_with_a_warning(make_kb, tmp_path: Path) -> None:
    root = make_kb({"a.md": "# A\ntext\n", "inner.md": "# Inner\ntext\n"})
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\noutside\n")
    (root / "leak.md").symlink_to(outside)
    (root / "alias.md").symlink_to(root / "inner.md")
    docs = load_documents(root)
    assert [f.path for f in docs.files] == ["a.md", "alias.md", "inner.md"]
    assert docs.warnings == [
        {"event": "file_skipped", "path": "leak.md", "reason": "symlink to a file outside the knowledge base"}
    ]


def test_chunks_start_at_headings_and_carry_the_heading_path(make_kb) -> None:
    root = make_kb({"guide.md": GUIDE})
    chunks = load_documents(root).chunks
    assert [(c.line_start, c.line_end, c.title) for c in chunks] == [
        (1, 3, "Deployment Guide"),
        # "## Prerequisites" has its own paragraph, "### Ports" starts a new chunk
        (5, 7, "Deployment Guide > Prerequisites"),
        (9, 16, "Deployment Guide > Prerequisites > Ports"),
        (18, 20, "Deployment Guide > Rollback"),
    ]
    for chunk in chunks:
        assert_exact(root, chunk)
    assert "# not a heading" in chunks[2].text  # fenced code is not split at '#'


def test_heading_directly_followed_by_a_subheading_stays_with_it(make_kb) -> None:
    root = make_kb({"api.md": "# API\n\n## Auth\n\nUse a token.\n\n## Limits\n\n100 requests a minute.\n"})
    chunks = load_documents(root).chunks
    assert [(c.line_start, c.line_end, c.title) for c in chunks] == [(1, 5, "API > Auth"), (7, 9, "API > Limits")]


def test_title_falls_back_to_the_file_stem_and_setext_and_rst_headings_count(make_kb) -> None:
    root = make_kb(
        {
            "no_h1.md": "Just text, no heading.\n\n## Section\n\nMore.\n",
            "setext.md": "Setext Title\n============\n\nIntro.\n\nPart\n----\n\nBody.\n",
            "doc.rst": "=====\nTitle\n=====\n\nIntro.\n\nSection\n-------\n\nBody.\n",
            "plain.txt": "# not markdown in a .txt\nline\n",
        }
    )
    titles = {(c.path, c.line_start): c.title for c in load_documents(root).chunks}
    assert titles == {
        ("doc.rst", 1): "Title",
        ("doc.rst", 7): "Title > Section",
        ("no_h1.md", 1): "no_h1",
        ("no_h1.md", 3): "no_h1 > Section",
        ("plain.txt", 1): "plain",
        ("setext.md", 1): "Setext Title",
        ("setext.md", 6): "Setext Title > Part",
    }


def test_long_sections_are_cut_by_size_between_lines_with_a_little_overlap(make_kb) -> None:
    paragraphs = []
    for p in range(12):
        paragraphs.append("\n".join(f"Paragraph {p} sentence {s} talks about topic {p * s}." for s in range(6)))
    root = make_kb({"long.md": "# Long\n\n" + "\n\n".join(paragraphs) + "\n"})
    settings = ChunkSettings(target_tokens=60, max_tokens=100, overlap_tokens=20)
    chunks = load_documents(root, settings=settings).chunks
    assert len(chunks) > 5
    lines = file_lines(root, "long.md")
    covered: set[int] = set()
    for chunk in chunks:
        assert_exact(root, chunk)
        assert sum(count_tokens(line) for line in chunk.text.split("\n")) <= settings.max_tokens
        assert chunk.text.split("\n")[0].strip() and chunk.text.split("\n")[-1].strip()  # no blank edges
        covered.update(range(chunk.line_start, chunk.line_end + 1))
    assert {n for n, line in enumerate(lines, 1) if line.strip()} <= covered
    # consecutive chunks never overlap by more than a couple of lines
    for before, after in itertools.pairwise(chunks):
        assert after.line_start > before.line_start
        assert before.line_end - after.line_start + 1 <= 2


def test_a_line_longer_than_the_limit_is_never_cut(make_kb) -> None:
    long_line = " ".join(f"word{i}" for i in range(400))
    root = make_kb({"wide.txt": f"before\n{long_line}\nafter\n"})
    chunks = load_documents(root).chunks
    assert long_line in [c.text for c in chunks] or any(long_line in c.text.split("\n") for c in chunks)
    for chunk in chunks:
        assert_exact(root, chunk)


def test_chunk_ids_are_deterministic_and_depend_on_path_lines_and_text(make_kb, tmp_path: Path) -> None:
    files = {"guide.md": GUIDE, "faq.md": "# FAQ\n\nQ: port?\nA: 8443.\n"}
    first = load_documents(make_kb(files, name="one")).chunks
    second = load_documents(make_kb(files, name="two")).chunks
    assert [c.id for c in first] == [c.id for c in second]
    assert len({c.id for c in first}) == len(first)
    edited = load_documents(make_kb({**files, "faq.md": "# FAQ\n\nQ: port?\nA: 9443.\n"}, name="three")).chunks
    assert {c.id for c in edited} - {c.id for c in first} == {c.id for c in edited if c.path == "faq.md"}


def test_no_absolute_paths_in_chunks(make_kb) -> None:
    root = make_kb({"docs/a.md": "# A\n\ntext\n"})
    for chunk in load_documents(root).chunks:
        assert str(root) not in repr(chunk)
        assert chunk.path == "docs/a.md"


def test_binary_files_are_skipped_with_a_structured_warning(make_kb) -> None:
    root = make_kb({"a.md": "# A\ntext\n", "blob.md": b"# looks like text\x00\x01\x02 but is not\n"})
    docs = load_documents(root)
    assert [f.path for f in docs.files] == ["a.md"]
    assert docs.warnings == [
        {"event": "file_skipped", "path": "blob.md", "reason": "binary file (NUL byte in the first 8 KiB)"}
    ]


def test_non_utf8_files_are_decoded_with_replacement_and_a_warning(make_kb) -> None:
    root = make_kb({"latin1.md": "# Café\n\nCrème brûlée, naïve.\n".encode("latin-1")})
    docs = load_documents(root)
    [chunk] = docs.chunks
    assert chunk.title == "Caf\ufffd"
    assert "Cr\ufffdme" in chunk.text
    assert (chunk.line_start, chunk.line_end) == (1, 3)
    assert docs.warnings == [
        {
            "event": "file_decoded_with_replacement",
            "path": "latin1.md",
            "reason": "not valid UTF-8; undecodable bytes were replaced with U+FFFD",
        }
    ]


def test_crlf_line_endings_and_a_bom_do_not_leak_into_the_text(make_kb) -> None:
    root = make_kb({"win.md": b"\xef\xbb\xbf# Windows\r\n\r\nline one\r\nline two\r\n"})
    [chunk] = load_documents(root).chunks
    assert chunk.text == "# Windows\n\nline one\nline two"
    assert (chunk.line_start, chunk.line_end, chunk.title) == (1, 4, "Windows")


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"empty.md": "", "blank.txt": "\n\n   \n"},
        {"blob.md": b"\x00\x01"},
        {"code.py": "print(1)\n", ".hidden.md": "# hidden\n"},
    ],
    ids=["no-files", "only-blank-files", "only-binary", "only-ignored"],
)
def test_an_empty_knowledge_base_raises_a_clear_error(make_kb, tmp_path: Path, files) -> None:
    root = make_kb(files)
    root.mkdir(exist_ok=True)
    with pytest.raises(EmptyKnowledgeBaseError, match=str(root)) as info:
        load_documents(root)
    assert ".md" in str(info.value)


def test_a_missing_folder_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_documents(tmp_path / "nowhere")


def test_a_large_file_is_chunked_while_reading_it_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "big.md"
    section = "## Section {n}\n\n" + "Some reasonably long line of prose about item {n} and its details.\n" * 40 + "\n"
    with open(path, "w", encoding="utf-8") as f:
        for n in range(1200):
            f.write(section.format(n=n))
    size = os.path.getsize(path)
    assert size > 3_000_000
    tracemalloc.start()
    try:
        count = 0
        last_end = 0
        for chunk in iter_chunks("big.md", LineReader(path), kind="markdown", title="big"):
            count += 1
            assert chunk.line_start > last_end - 3
            last_end = chunk.line_end
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count >= 1200
    assert peak < size / 10, f"peak {peak} bytes while chunking a {size}-byte file"
