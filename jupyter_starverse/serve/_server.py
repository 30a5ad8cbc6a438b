"""The endpoint process: an OpenAI-compatible HTTP server over one engine (stdlib ``http.server``).

Run as ``python -m jupyter_starverse.serve._server --model-path DIR --name NAME [...]``. Routes:

- ``GET /health``: ``{"status": "ok"}`` without a token (probes);
- ``GET /v1/models``: the served model (with its lineage under ``starverse``);
- ``POST /v1/completions``, ``POST /v1/chat/completions``: ``stream: true`` answers with
  server-sent events, ``data: {chunk}`` per piece and ``data: [DONE]`` at the end.

Every ``/v1`` route needs ``Authorization: Bearer TOKEN``; the token is read from a file
(``--token-file``, 0600 in the run folder) or an environment variable named by ``--token-env``
(a Kubernetes Secret by reference). Bad requests get a 4xx with an OpenAI-style
``{"error": {"message", "type", "param", "code"}}``. With ``--run-dir`` the process writes
``endpoint.json`` (port, URL) there once the model answers; ``--idle-exit S`` stops it after S
seconds without a request; SIGTERM stops it cleanly.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ._engines import Engine, Generation, generate, load_engine

__all__ = ["main"]

_MAX_BODY = 1 << 20
_MAX_MESSAGES = 200


class RequestError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = {401: "authentication_error", 404: "not_found_error"}.get(self.status, "invalid_request_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


class Endpoint:
    """What the handlers share: the engine, the token, the served name, the idle clock."""

    def __init__(self, engine: Engine, name: str, token: str | None, *, max_tokens: int, info: dict[str, Any]) -> None:
        self.engine, self.name, self.token, self.max_tokens, self.info = engine, name, token, max_tokens, info
        self.created = int(time.time())
        self.last_request = time.monotonic()
        self.active = 0
        self._lock = threading.Lock()

    def touch(self, delta: int) -> None:
        with self._lock:
            self.active += delta
            self.last_request = time.monotonic()

    # -- request checks ----------------------------------------------------------------------------
    def check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is None:
            return  # OpenAI requires it; a one-model endpoint can do without
        if model != self.name:
            raise RequestError(
                404, f"the model {model!r} is not served here; this endpoint serves {self.name!r}",
                param="model", code="model_not_found",
            )  # fmt: skip

    def sampling(self, body: dict[str, Any], default_tokens: int) -> tuple[int, float, int]:
        tokens = body.get("max_completion_tokens", body.get("max_tokens", default_tokens))
        if tokens is None:
            tokens = default_tokens
        if not isinstance(tokens, int) or isinstance(tokens, bool) or not 1 <= tokens <= self.max_tokens:
            raise RequestError(400, f"max_tokens must be a whole number 1..{self.max_tokens}", param="max_tokens")
        temperature = body.get("temperature", 0.0)
        if temperature is None:
            temperature = 0.0
        if not isinstance(temperature, int | float) or isinstance(temperature, bool) or not 0 <= temperature <= 2:
            raise RequestError(400, "temperature must be a number 0..2", param="temperature")
        seed = body.get("seed", 0)
        if seed is None:
            seed = 0
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise RequestError(400, "seed must be a whole number", param="seed")
        if body.get("n", 1) not in (1, None):
            raise RequestError(400, "only n=1 is served", param="n")
        return tokens, float(temperature), seed

    def messages(self, body: dict[str, Any]) -> list[dict[str, str]]:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise RequestError(400, "messages is required: a non-empty list of {role, content}", param="messages")
        if len(msgs) > _MAX_MESSAGES:
            raise RequestError(400, f"at most {_MAX_MESSAGES} messages", param="messages")
        out = []
        for m in msgs:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # content parts: only text is understood
                parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
                content = "".join(p for p in parts if isinstance(p, str)) if len(parts) == len(content) else None
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "developer"):
                raise RequestError(400, "each message needs a role: system, user or assistant", param="messages")
            if not isinstance(content, str):
                raise RequestError(400, "each message needs text content", param="messages")
            role = "system" if m["role"] == "developer" else str(m["role"])
            out.append({"role": role, "content": content})
        return out

    def prompt(self, body: dict[str, Any]) -> str:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise RequestError(400, "prompt is required: one string", param="prompt")
        return prompt

    def model_card(self) -> dict[str, Any]:
        return {"id": self.name, "object": "model", "created": self.created, "owned_by": "starverse",
                "starverse": self.info}  # fmt: skip


def _handler(ep: Endpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "starverse-serve"

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} {self.address_string()} {format % args}\n")

        # -- plumbing ------------------------------------------------------------------------------
        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorize(self) -> None:
            if ep.token is None:
                return
            given = self.headers.get("Authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), ep.token.encode()):
                raise RequestError(401, "a valid API key is required: Authorization: Bearer TOKEN",
                                   code="invalid_api_key")  # fmt: skip

        def _body(self) -> dict[str, Any]:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise RequestError(400, "Content-Length is not a number") from None
            if length > _MAX_BODY:
                raise RequestError(413, f"the request body is over {_MAX_BODY} bytes")
            raw = self.rfile.read(length) if length > 0 else b""
            try:
                body = json.loads(raw or b"null")
            except ValueError as e:
                raise RequestError(400, f"the body is not JSON: {e}") from None
            if not isinstance(body, dict):
                raise RequestError(400, "the body must be a JSON object")
            return body

        def _guard(self, fn: Any) -> None:
            ep.touch(+1)
            try:
                fn()
            except RequestError as e:
                self._json(e.status, e.body())
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away mid-stream
            except Exception as e:  # an engine failure is the server's, with what it said
                self.log_message("error: %s: %s", type(e).__name__, e)
                self._json(500, {"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error",
                                           "param": None, "code": None}})  # fmt: skip
            finally:
                ep.touch(-1)

        # -- routes --------------------------------------------------------------------------------
        def do_GET(self) -> None:
            self._guard(self._get)

        def do_POST(self) -> None:
            self._guard(self._post)

        def _get(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/health":
                self._json(200, {"status": "ok", "model": ep.name})
                return
            self._authorize()
            if path == "/v1/models":
                self._json(200, {"object": "list", "data": [ep.model_card()]})
            elif path == f"/v1/models/{ep.name}":
                self._json(200, ep.model_card())
            else:
                raise RequestError(404, f"no route GET {path}", code="unknown_route")

        def _post(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path not in ("/v1/completions", "/v1/chat/completions"):
                self._authorize()
                raise RequestError(404, f"no route POST {path}", code="unknown_route")
            self._authorize()
            body = self._body()
            ep.check_model(body)
            chat = path.endswith("chat/completions")
            tokens, temperature, seed = ep.sampling(body, min(256 if chat else 16, ep.max_tokens))
            ids = ep.engine.chat_ids(ep.messages(body)) if chat else ep.engine.text_ids(ep.prompt(body))
            if not ids:
                raise RequestError(400, "the prompt is empty", param="prompt")
            stream = body.get("stream", False)
            if not isinstance(stream, bool):
                raise RequestError(400, "stream must be true or false", param="stream")
            gen = Generation()
            pieces = generate(ep.engine, ids, max_tokens=tokens, temperature=temperature, seed=seed, out=gen)
            rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
            if stream:
                self._stream(rid, chat, pieces, gen, body)
            else:
                text = "".join(pieces)
                self._json(200, self._whole(rid, chat, text, gen))

        def _usage(self, gen: Generation) -> dict[str, int]:
            return {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                    "total_tokens": gen.prompt_tokens + gen.completion_tokens}  # fmt: skip

        def _whole(self, rid: str, chat: bool, text: str, gen: Generation) -> dict[str, Any]:
            head = {"id": rid, "created": int(time.time()), "model": ep.name, "usage": self._usage(gen)}
            if chat:
                message = {"role": "assistant", "content": text}
                choice = {"index": 0, "message": message, "finish_reason": gen.finish_reason, "logprobs": None}
                return {**head, "object": "chat.completion", "choices": [choice]}
            choice = {"index": 0, "text": text, "finish_reason": gen.finish_reason, "logprobs": None}
            return {**head, "object": "text_completion", "choices": [choice]}

        def _stream(self, rid: str, chat: bool, pieces: Any, gen: Generation, body: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            created = int(time.time())
            kind = "chat.completion.chunk" if chat else "text_completion"

            def send(choice: dict[str, Any], **extra: Any) -> None:
                chunk = {"id": rid, "object": kind, "created": created, "model": ep.name, "choices": [choice], **extra}
                self.wfile.write(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n")
                self.wfile.flush()

            if chat:
                send({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})
            for piece in pieces:
                if chat:
                    send({"index": 0, "delta": {"content": piece}, "finish_reason": None})
                else:
                    send({"index": 0, "text": piece, "finish_reason": None, "logprobs": None})
            last: dict[str, Any] = {"index": 0, "finish_reason": gen.finish_reason}
            tail: dict[str, Any] = {"delta": {}} if chat else {"text": "", "logprobs": None}
            last.update(tail)
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            send(last, **({"usage": self._usage(gen)} if usage else {}))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


class _Server(ThreadingHTTPServer):
    # socketserver's backlog of 5 drops the SYNs of 8 clients arriving at once: each waits 1 s to retry
    request_queue_size = 128
    daemon_threads = True


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip() or None
    if args.token_env:
        value = os.environ.get(args.token_env, "").strip()
        if not value:
            raise SystemExit(f"the token variable {args.token_env} is empty: set it from the endpoint's Secret")
        return value
    return None


def _write_endpoint(run_dir: Path, data: dict[str, Any]) -> None:
    tmp = run_dir / ".endpoint.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    tmp.replace(run_dir / "endpoint.json")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jupyter_starverse.serve._server")
    p.add_argument("--model-path", required=True)
    p.add_argument("--name", required=True, help="the model name clients pass")
    p.add_argument("--engine", default="auto")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token-file")
    p.add_argument("--token-env")
    p.add_argument("--run-dir")
    p.add_argument("--info", help="a JSON file of what /v1/models shows under 'starverse' (lineage)")
    p.add_argument("--idle-exit", type=float, default=0.0)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    token = _token(args)
    server = _Server((args.host, args.port), BaseHTTPRequestHandler)  # bound first: the port is known
    server.daemon_threads = True
    engine = load_engine(Path(args.model_path), args.engine, threads=args.threads)
    info: dict[str, Any] = {}
    if args.info:
        try:
            info = json.loads(Path(args.info).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            info = {}
    ep = Endpoint(engine, args.name, token, max_tokens=args.max_tokens, info={"engine": engine.name, **info})
    server.RequestHandlerClass = _handler(ep)
    port = server.server_address[1]
    stop = threading.Event()

    def shutdown(*_: object) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if args.idle_exit > 0:

        def idle() -> None:
            while not stop.wait(min(args.idle_exit, 5.0)):
                if ep.active == 0 and time.monotonic() - ep.last_request > args.idle_exit:
                    sys.stderr.write(f"no request for {args.idle_exit:g} s: stopping\n")
                    shutdown()

        threading.Thread(target=idle, daemon=True).start()
    url = f"http://{args.host}:{port}/v1"
    if args.run_dir:
        _write_endpoint(Path(args.run_dir), {"port": port, "host": args.host, "url": url, "pid": os.getpid(),
                                             "engine": engine.name, "ready_at": time.time()})  # fmt: skip
    sys.stderr.write(f"serving {args.name} ({engine.name}) on {url}\n")
    sys.stderr.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
