"""Bad settings are found first and named (issue 30, item 6).

Every ``crag-lab`` command checks what it will read before the embedding model loads or the index
builds: the ``.env`` file (readable, UTF-8, every line parsed), every ``KB_AGENT_*`` / ``CRAG_*``
setting, ``--api-base`` (an http(s) URL with a valid port), ``--cache`` (a response cache of ours,
or a new file) and ``--audit``. Each failure is one line on stderr naming the variable, file or
option, exit status 2, no traceback. ``ResponseCache(path)`` on a file that is not a cache raises
`CacheFileError` naming it, and leaves the file as it was.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import crag_lab.embeddings
from crag_lab._env import check_env_file, url_problem
from crag_lab.cache import COLUMNS, CacheFileError, ResponseCache
from crag_lab.cli import main
from crag_lab.config import CragConfig, VectorStoreConfig
from crag_lab.errors import CragLabError, SettingsError
from crag_lab.kb import KnowledgeBase
from crag_lab.lab import Lab
from crag_lab.models import ModelReply
from crag_lab.tools.remote import RemoteSettings

HYPOTHESIS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SETTING_NAMES = sorted(
    [f"KB_AGENT_{f.upper()}" for f in CragConfig.model_fields]
    + [f"CRAG_{f.upper()}" for f in (*VectorStoreConfig.model_fields, *RemoteSettings.model_fields)])


class Reached(Exception):
    """Raised where the run would load the embedding model or build the index."""


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working folder without ``.env`` or settings variables, holding ``kb/``; loading the embedding
    model or building an index raises `Reached` instead."""
    for name in list(os.environ):
        if name.upper().startswith(("KB_AGENT_", "CRAG_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "ports.md").write_text("# Ports\n\nThe gateway listens on port 8443.\n", encoding="utf-8")
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "Which port?", "complexity": "simple"}\n',
                                      encoding="utf-8")

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise Reached

    monkeypatch.setattr(crag_lab.embeddings, "default_embed_model", reached)
    monkeypatch.setattr(KnowledgeBase, "build", reached)
    yield tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str | None:
    """The one error line of ``crag-lab argv``; None when the run got to the model or the index."""
    try:
        rc = main(argv)
    except Reached:
        capsys.readouterr()
        return None
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("crag-lab: "), err
    return err


def error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    err = run(argv, capsys)
    assert err is not None, f"{argv}: reached the model or the index despite the bad setting"
    return err


COMMANDS = [["index", "kb"], ["ask", "Which port?", "--kb", "kb"], ["demo", "--kb", "kb", "--queries", "q.jsonl"],
            ["eval", "--dataset", "q.jsonl", "--kb", "kb", "--no-progress"]]


# --- .env ---------------------------------------------------------------------------------------


ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "cp1252", "shift_jis",
             "koi8-r"]


@HYPOTHESIS
@given(encoding=st.sampled_from(ENCODINGS), note=st.text(st.sampled_from("a Z=é€ßжü—日'"), max_size=12),
       command=st.sampled_from(COMMANDS))
def test_env_file_not_utf8_is_named_before_the_model_loads(
    cli: Path, capsys: pytest.CaptureFixture[str], encoding: str, note: str, command: list[str]
) -> None:
    text = f"# {note}\nKB_AGENT_TOP_K=4\n"
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError:
        assume(False)
    (cli / ".env").write_bytes(data)
    try:
        data.decode("utf-8-sig")
        utf8 = b"\x00" not in data
    except UnicodeDecodeError:
        utf8 = False
    err = run(command, capsys)
    if utf8:
        assert err is None, err
    else:
        assert err is not None and err.startswith("crag-lab: .env: ") and "save it as UTF-8" in err, err
    assert not (cli / "kb" / ".crag_index").exists()


def test_env_file_with_a_byte_order_mark_is_read(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """UTF-8 with the mark some editors write is UTF-8: python-dotenv drops it, and so does the check."""
    (cli / ".env").write_bytes("KB_AGENT_TOP_K=4\n".encode("utf-8-sig"))
    assert CragConfig().top_k == 4
    assert run(["index", "kb"], capsys) is None


def test_env_file_in_utf16_is_a_named_error_for_library_users_too(cli: Path) -> None:
    (cli / ".env").write_bytes("KB_AGENT_TOP_K=4\n".encode("utf-16"))
    for model in (CragConfig, VectorStoreConfig, RemoteSettings):
        with pytest.raises(SettingsError, match=r"^\.env: is saved as UTF-16, not UTF-8; save it as UTF-8$"):
            model()


def test_env_file_line_that_cannot_be_parsed_is_named(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (cli / ".env").write_text('KB_AGENT_TOP_K=4\nKB_AGENT_GRADING="per_item\nKB_AGENT_MAX_ITERATIONS=2\n',
                              encoding="utf-8")
    assert "crag-lab: .env: line 2 is not NAME=value" in error_line(["index", "kb"], capsys)


def test_env_folder_is_left_alone_and_a_fifo_is_refused(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (cli / ".env").mkdir()  # python -m venv .env
    assert run(["index", "kb"], capsys) is None
    (cli / ".env").rmdir()
    os.mkfifo(cli / ".env")  # pydantic-settings would block reading it
    assert "crag-lab: .env: is not a regular file" in error_line(["index", "kb"], capsys)
    assert check_env_file(cli / "absent.env") == {}


# --- KB_AGENT_* / CRAG_* values -------------------------------------------------------------------


WORDS = st.from_regex(r"[A-Za-z][A-Za-z_-]{0,10}", fullmatch=True).filter(
    lambda w: w.lower() not in {"t", "f", "y", "n", "on", "off", "yes", "no", "true", "false", "inf", "infinity", "nan"})


def _outside(low: float, high: float) -> st.SearchStrategy[str]:
    return st.one_of(st.floats(high + 1e-3, 1e6), st.floats(-1e6, low - 1e-3)).map(repr)


def _int_outside(low: int, high: int | None) -> st.SearchStrategy[str]:
    below = st.integers(-10**6, low - 1).map(str)
    return below if high is None else st.one_of(below, st.integers(high + 1, 10**6).map(str))


BAD_PORT_URLS = st.builds("http://127.0.0.1:{}/v1".format, st.one_of(
    st.integers(65536, 10**8).map(str), st.just("0"), st.just("80a"),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2ff, exclude_characters="/?#@[]\\'\""), min_size=1,
            max_size=6).filter(lambda p: not (p.isascii() and p.isdigit()))))

BAD_VALUES: dict[str, st.SearchStrategy[str]] = {
    "KB_AGENT_RELEVANCE_FLOOR": st.one_of(WORDS, st.floats(-1e6, -1e-3).map(repr)),
    "KB_AGENT_GENERATE_THRESHOLD": st.one_of(WORDS, st.floats(1.001, 1e6).map(repr)),
    "KB_AGENT_VECTOR_SCORE_THRESHOLD": st.one_of(WORDS, _outside(-1.0, 1.0)),
    "KB_AGENT_AUTO_APPROVE_MAX_ITEMS": st.one_of(WORDS, _int_outside(0, 1000)),
    "KB_AGENT_MAX_ITERATIONS": st.one_of(WORDS, _int_outside(1, 50)),
    "KB_AGENT_TOP_K": st.one_of(WORDS, _int_outside(1, 100)),
    "KB_AGENT_GRADING": WORDS.filter(lambda w: w not in ("batch", "per_item")),
    "KB_AGENT_AGGREGATOR": WORDS.filter(lambda w: w not in ("mean", "max", "any_above")),
    "KB_AGENT_ROUTING": WORDS,
    "KB_AGENT_MODEL_RETRIES": st.one_of(WORDS, _int_outside(0, 10)),
    "KB_AGENT_MODEL_TIMEOUT_S": st.one_of(WORDS, _outside(1e-9, 3600.0)),
    "CRAG_VECTOR_STORE": WORDS.filter(lambda w: w not in ("faiss", "qdrant")),
    "CRAG_QDRANT_URL": BAD_PORT_URLS,
    "CRAG_WEB_FETCH_ENABLED": WORDS,
    "CRAG_MAX_BYTES": st.one_of(WORDS, _int_outside(1, None)),
    "CRAG_TIMEOUT_S": st.one_of(WORDS, _outside(1e-9, 600.0)),
    "CRAG_JIRA_BASE_URL": st.one_of(BAD_PORT_URLS, st.builds("ftp://{}.example".format, WORDS)),
}
HIDDEN = {"CRAG_WEB_FETCH_ENABLED", "CRAG_MAX_BYTES", "CRAG_TIMEOUT_S", "CRAG_JIRA_BASE_URL"}  # RemoteSettings


@HYPOTHESIS
@given(data=st.data(), name=st.sampled_from(sorted(BAD_VALUES)), in_env_file=st.booleans(),
       command=st.sampled_from(COMMANDS))
def test_bad_setting_is_named_with_where_it_is_set_before_the_model_loads(
    cli: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject, name: str, in_env_file: bool,
    command: list[str]
) -> None:
    value = data.draw(BAD_VALUES[name], label="value")
    with pytest.MonkeyPatch.context() as mp:
        if in_env_file:
            (cli / ".env").write_text(f"# settings\n{name}='{value}'\n", encoding="utf-8")
        else:
            mp.setenv(name, value)
        try:
            err = error_line(command, capsys)
        finally:
            (cli / ".env").unlink(missing_ok=True)
    assert f"crag-lab: {name}" in err, err
    assert ("set in .env line 2" if in_env_file else "set in the environment") in err, err
    if name in HIDDEN:  # a mistyped value there may be a token: never echoed
        assert f"{name}=" not in err, err
    else:
        assert f"{name}={value!r}" in err, err
    assert not (cli / "kb" / ".crag_index").exists()


def test_settings_that_conflict_are_named(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (cli / ".env").write_text("KB_AGENT_RELEVANCE_FLOOR=0.9\n", encoding="utf-8")
    err = error_line(["index", "kb"], capsys)
    assert "KB_AGENT_RELEVANCE_FLOOR (set in .env line 1)" in err and "must be <= generate_threshold" in err


@HYPOTHESIS
@given(name=st.sampled_from(SETTING_NAMES), data=st.data(), in_env_file=st.booleans())
def test_a_misspelt_setting_is_named_with_the_one_meant(
    cli: Path, capsys: pytest.CaptureFixture[str], name: str, data: st.DataObject, in_env_file: bool
) -> None:
    prefix = "KB_AGENT_" if name.startswith("KB_AGENT_") else "CRAG_"
    rest = name[len(prefix):]
    at = data.draw(st.integers(0, len(rest) - 1), label="at")
    edit = data.draw(st.sampled_from(["drop", "double", "swap"]), label="edit")
    typo = prefix + {"drop": rest[:at] + rest[at + 1:], "double": rest[:at] + rest[at] + rest[at:],
                     "swap": rest[:at] + rest[at + 1:at + 2] + rest[at] + rest[at + 2:]}[edit]
    assume(typo not in SETTING_NAMES and typo != prefix and not typo.startswith("CRAG_LAB_"))
    with pytest.MonkeyPatch.context() as mp:
        if in_env_file:
            (cli / ".env").write_text(f"{typo}=1\n", encoding="utf-8")
        else:
            mp.setenv(typo, "1")
        try:
            err = error_line(["index", "kb"], capsys)
        finally:
            (cli / ".env").unlink(missing_ok=True)
    assert f"{typo} (set in" in err and "is not a setting" in err and "did you mean" in err, err


def test_project_variables_and_unrelated_names_pass(cli: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_LAB_REAL_MODEL", "skip")
    monkeypatch.setenv("CRAG_SOMETHING_ELSE_ENTIRELY", "x")
    (cli / ".env").write_text("OPENAI_API_KEY=sk-x\nKB_AGENT_TOP_K=4\nCRAG_TIMEOUT_S=5\n", encoding="utf-8")
    for command in COMMANDS:
        assert run(command, capsys) is None


# --- --api-base -------------------------------------------------------------------------------------


@HYPOTHESIS
@given(url=st.one_of(
    BAD_PORT_URLS,
    st.builds("http://{}:8080/v1".format, st.sampled_from(["", "exa mple", "-bad-", "a..b", "[::1", "[zz]"])),
    st.builds("{}://127.0.0.1:8080/v1".format, st.sampled_from(["ftp", "file", "ws", ""])),
    st.sampled_from(["127.0.0.1:8080/v1", "localhost:8080", "http//127.0.0.1:8080", " ", "http://h:8080/v1\n"])))
def test_malformed_api_base_is_named_before_the_model_loads(
    cli: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """Before: ``http://127.0.0.1:80a/v1`` printed an httpx.InvalidURL traceback after indexing."""
    err = error_line(["eval", "--dataset", "q.jsonl", "--kb", "kb", "--no-progress", "--api-base", url], capsys)
    assert err.startswith(f"crag-lab: --api-base {url!r} ") and "give the server's URL" in err, err
    assert not (cli / "kb" / ".crag_index").exists()


@settings(max_examples=200, deadline=None)
@given(host=st.one_of(st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z]{2,6}){0,2}", fullmatch=True),
                      st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map("[{}]".format)),
       port=st.one_of(st.none(), st.integers(1, 65535)), scheme=st.sampled_from(["http", "https", "HTTP"]),
       path=st.sampled_from(["", "/", "/v1", "/api/v1/"]))
def test_valid_api_base_passes_and_httpx_agrees(host: str, port: int | None, scheme: str, path: str) -> None:
    import httpx

    url = f"{scheme}://{host}{'' if port is None else f':{port}'}{path}"
    assert url_problem(url) is None, url
    assert httpx.URL(url).port in (port, None)


# --- the response cache --------------------------------------------------------------------------


def _cache_with_entries(path: Path, n: int = 30) -> None:
    cache = ResponseCache(path)
    for i in range(n):
        cache.put(f"k{i}", "m", "plan", ModelReply(text="x" * (i * 40), prompt_tokens=i, completion_tokens=1))
    cache.close()


@HYPOTHESIS
@given(junk=st.binary(min_size=1, max_size=4096).filter(lambda b: not b.startswith(b"SQLite format 3\x00")))
def test_random_bytes_as_cache_are_named_at_construction_and_kept(cli: Path, junk: bytes) -> None:
    """Before: sqlite3.DatabaseError 'file is not a database', naming no file."""
    path = cli / "responses.sqlite"
    path.write_bytes(junk)
    with pytest.raises(CacheFileError, match=f"^response cache {re.escape(str(path))}: .*(delete or move it|another path)"):
        ResponseCache(path)
    assert path.read_bytes() == junk  # never changed, never deleted


@pytest.fixture(scope="module")
def cache_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A response cache of 30 entries, as bytes."""
    path = tmp_path_factory.mktemp("cache") / "c.sqlite"
    _cache_with_entries(path)
    return path.read_bytes()


@HYPOTHESIS
@given(cut=st.integers(1, 10**6), tail=st.binary(max_size=512), flips=st.lists(st.integers(0, 10**6), max_size=4))
def test_damaged_cache_is_a_named_error_or_works_never_a_bare_sqlite_error(
    cli: Path, cache_bytes: bytes, cut: int, tail: bytes, flips: list[int]
) -> None:
    path = cli / "c.sqlite"
    data = bytearray(cache_bytes)
    for at in flips:  # bytes changed in place, and the file cut short with junk after it
        data[at % len(data)] ^= 0xFF
    damaged = bytes(data[:cut % (len(data) + 1)]) + tail
    path.write_bytes(damaged)
    try:
        cache = ResponseCache(path)
        for i in range(30):
            cache.get(f"k{i}")
        cache.put("new", "m", "plan", ModelReply(text="y", prompt_tokens=1, completion_tokens=1))
        cache.close()
    except CacheFileError as exc:
        assert str(path) in str(exc)
        assert path.read_bytes() == damaged


def test_another_programs_database_is_refused_and_not_changed(cli: Path) -> None:
    """Before: the cache added its table to any SQLite file it was given."""
    path = cli / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(CacheFileError, match="another program"):
        ResponseCache(path)
    assert path.read_bytes() == before
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE responses ({', '.join(COLUMNS[:2])})")
    db.commit()
    db.close()
    with pytest.raises(CacheFileError, match="lacks task, text"):
        ResponseCache(path)


def test_cache_damaged_mid_run_names_the_file(cli: Path) -> None:
    path = cli / "c.sqlite"
    _cache_with_entries(path)
    cache = ResponseCache(path)
    path.write_bytes(b"\x00garbage" * 512)
    with pytest.raises(CacheFileError, match=f"^response cache {re.escape(str(path))}: "):
        for i in range(30):
            cache.get(f"k{i}")
        cache.put("new", "m", "plan", ModelReply(text="y", prompt_tokens=1, completion_tokens=1))


def test_empty_new_and_memory_caches_still_work(cli: Path) -> None:
    (cli / "empty.sqlite").write_bytes(b"")
    for path in (cli / "empty.sqlite", cli / "new.sqlite", ":memory:"):
        cache = ResponseCache(path)
        cache.put("k", "m", "plan", ModelReply(text="t", prompt_tokens=1, completion_tokens=1))
        assert cache.get("k") is not None
    _cache_with_entries(cli / "full.sqlite")
    assert len(ResponseCache(cli / "full.sqlite")) == 30


@pytest.mark.parametrize("kind", ["junk", "folder", "fifo", "foreign"])
def test_bad_cache_option_is_named_before_the_model_loads(
    cli: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = cli / "c.sqlite"
    if kind == "junk":
        path.write_bytes(b"not a database at all\n" * 20)
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # SQLite would block on it
    else:
        sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    err = error_line(["eval", "--dataset", "q.jsonl", "--kb", "kb", "--no-progress", "--cache", str(path)], capsys)
    assert err.startswith(f"crag-lab: --cache {path}: "), err
    assert path.exists() and not (cli / "kb" / ".crag_index").exists()
    assert run(["eval", "--dataset", "q.jsonl", "--kb", "kb", "--no-progress", "--cache",
                str(cli / "fresh.sqlite")], capsys) is None
    assert not (cli / "fresh.sqlite").exists()  # the check creates nothing


def test_bad_audit_path_is_named_before_the_model_loads(cli: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--audit kb: is a folder" in error_line(["ask", "Which port?", "--kb", "kb", "--audit", "kb"], capsys)


# --- library users ----------------------------------------------------------------------------------


def test_lab_checks_settings_and_cache_before_the_model_loads(cli: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a bad CRAG_* tool setting or cache file failed only after the folder was indexed."""
    (cli / "bad.sqlite").write_bytes(b"junk" * 100)
    with pytest.raises(CacheFileError, match=r"bad\.sqlite"):
        Lab.from_directory("kb", cache=cli / "bad.sqlite")
    monkeypatch.setenv("CRAG_TIMEOUT_S", "abc")
    with pytest.raises(ValueError, match="timeout_s"):
        Lab.from_directory("kb")
    with pytest.raises(Reached):
        Lab.from_directory("kb", remote=False)  # the remote tools' settings are not read
    monkeypatch.setenv("CRAG_VECTOR_STORE", "nope")
    with pytest.raises(ValueError, match="vector_store"):
        Lab.from_directory("kb", remote=False)


def test_new_errors_share_the_base_class() -> None:
    assert issubclass(SettingsError, CragLabError) and issubclass(SettingsError, ValueError)
    assert issubclass(CacheFileError, CragLabError) and issubclass(CacheFileError, ValueError)


# --- the user's report, from the real command line -----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", ["utf16-env", "tool-setting", "api-base", "cache"])
def test_reported_cases_from_the_command_line(tmp_path: Path, case: str) -> None:
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "ports.md").write_text("# Ports\n\nThe gateway listens on port 8443.\n", encoding="utf-8")
    (tmp_path / "q.jsonl").write_text('{"id": "q1", "question": "Which port?"}\n', encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("KB_AGENT_", "CRAG_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    argv = ["ask", "Which port?", "--kb", "kb"]
    if case == "utf16-env":
        (tmp_path / ".env").write_bytes("KB_AGENT_TOP_K=4\n".encode("utf-16"))
        expected = "crag-lab: .env: is saved as UTF-16, not UTF-8; save it as UTF-8"
    elif case == "tool-setting":
        env["CRAG_TIMEOUT_S"] = "ten"
        expected = "crag-lab: CRAG_TIMEOUT_S (set in the environment): "
    elif case == "api-base":
        argv = ["eval", "--dataset", "q.jsonl", "--kb", "kb", "--no-progress", "--api-base", "http://127.0.0.1:80a/v1"]
        expected = "crag-lab: --api-base 'http://127.0.0.1:80a/v1' has an invalid port '80a'"
    else:
        (tmp_path / "c.sqlite").write_bytes(os.urandom(3000).replace(b"S", b"s"))
        argv = ["eval", "--dataset", "q.jsonl", "--kb", "kb", "--no-progress", "--cache", "c.sqlite"]
        expected = "crag-lab: --cache c.sqlite: is not a SQLite database"
    proc = subprocess.run([sys.executable, "-m", "crag_lab.cli", *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(expected) and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "kb" / ".crag_index").exists()  # nothing was indexed
