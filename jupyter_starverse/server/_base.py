"""The one base handler: facade access, thread offloading, JSON in/out, error mapping; and what the
handlers share besides: reading a body's text and number fields, answers whose JSON is their fields."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar, cast

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from .._inputs import find_surrogate
from .._json import to_jsonable
from ..client import Starverse
from ..errors import BadInputError, StarverseError, error_kind, missing_dependency

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["HEAVY_WORKERS", "MAX_DEPTH", "FieldsAnswer", "StarverseHandler", "body_text", "parse_int", "status_for"]

T = TypeVar("T")

#: Threads for long calls (pipeline validation and export, data estimates): their own pool, so
#: that eight of them at once queue there and never take every thread of the short calls.
HEAVY_WORKERS = 2
_heavy_lock = threading.Lock()
_heavy_pool: ThreadPoolExecutor | None = None


def _heavy() -> ThreadPoolExecutor:
    global _heavy_pool
    with _heavy_lock:
        if _heavy_pool is None:
            _heavy_pool = ThreadPoolExecutor(HEAVY_WORKERS, thread_name_prefix="starverse-heavy")
        return _heavy_pool


#: Deepest nesting a request body may have; our bodies need 3 (spec -> env -> value).
MAX_DEPTH = 32
#: Largest request body parsed (a 200-node pipeline is under 1 MiB; a feedback record under 4).
MAX_BODY = 16 << 20

#: What to do about an error that carries no hint of its own, by HTTP status.
_HINTS = {
    400: "correct the field named in 'field' (or the request) and send it again",
    403: "you may not do this here; ask the owner or an admin",
    404: "check the name or id; the list routes (GET jupyter-starverse/jobs, store, ...) show what exists",
    405: "this route does not take that method; see the route table in the server's docs",
    409: "the request clashes with what exists now; look at its state and try again",
    413: "send a smaller request",
}
_ASCII_INT = re.compile(r"[+-]?[0-9]{1,18}")


def _no_constant(name: str) -> Any:
    raise BadInputError(f"{name} is not a JSON value", hint="send finite numbers; NaN and Infinity are not JSON")


def _depth_ok(value: Any, limit: int) -> bool:
    """True when ``value`` nests at most ``limit`` containers (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def parse_int(value: str | None, name: str, *, default: int | None, low: int, high: int) -> int | None:
    """A query argument as a whole number in ``[low, high]``: ASCII digits only, else a 400."""
    if value is None or value == "":
        return default
    hint = f"give a whole number between {low} and {high} (ASCII digits), for example ?{name}={max(low, 1)}"
    if not _ASCII_INT.fullmatch(value.strip()):
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise BadInputError(f"?{name}={shown!r} is not a whole number", field=name, hint=hint)
    number = int(value.strip())
    if not low <= number <= high:
        raise BadInputError(
            f"?{name} must be a whole number between {low} and {high}, got {number}", field=name, hint=hint
        )
    return number


def body_text(body: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    """A JSON body's field ``key`` as a non-empty string (``None`` when absent and not ``required``), else a 400."""
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise BadInputError(f"{key!r} must be a non-empty string", field=key)
    return value


class FieldsAnswer:
    """A mixin for a dataclass answer whose JSON is its fields, in their order (``to_json``)."""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(cast("DataclassInstance", self))}


# The one mapping from our error families (errors.error_kind) to HTTP.
_STATUS = {"bad_input": 400, "forbidden": 403, "not_found": 404, "conflict": 409, "unavailable": 503}


def status_for(error: BaseException) -> int:
    """HTTP status for an exception raised by the core (500 for anything unexpected)."""
    return _STATUS.get(error_kind(error), 500)


class StarverseHandler(ExtensionHandlerMixin, APIHandler):
    """Base of every handler. A verb is: parse -> ``await self.run(core_call)`` -> ``finish_json``.

    Every verb must carry ``@tornado.web.authenticated``; tests/server/test_auth.py checks
    each route and verb against a server with no token.
    """

    @property
    def client(self) -> Starverse:
        """The facade built once in ``StarverseApp.initialize_settings``."""
        client: Starverse = self.settings["starverse_client"]
        return client

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking core call in a worker thread, off the event loop."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def run_heavy(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a long core call (seconds: a whole pipeline's check) in the pool of long calls.

        Those queue behind each other there (``HEAVY_WORKERS`` at a time), off the event loop
        and off the pool of :meth:`run`, so ``GET store`` answers while they work.
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_heavy(), lambda: fn(*args, **kwargs))

    def json_body(self) -> dict[str, Any]:
        """The request body as a JSON object; bad JSON is a 400, never a 500."""
        if not self.request.body:
            return {}
        hint = 'send a JSON object such as {"spec": {...}}'
        if len(self.request.body) > MAX_BODY:
            raise BadInputError(
                f"request body is {len(self.request.body):,} bytes; at most {MAX_BODY:,} are read",
                hint="send a smaller request: data goes into the store, not into a request",
            )
        try:
            body = json.loads(self.request.body, parse_constant=_no_constant)
        except BadInputError:
            raise
        except RecursionError:
            raise BadInputError(
                f"request body is nested too deeply (more than {MAX_DEPTH} levels)", hint=hint
            ) from None
        except ValueError as e:  # includes bad UTF-8 and integers over Python's digit limit
            raise BadInputError(f"request body is not valid JSON: {str(e)[:200]}", hint=hint) from None
        if not isinstance(body, dict):
            raise BadInputError("request body must be a JSON object", hint=hint)
        if not _depth_ok(body, MAX_DEPTH):
            raise BadInputError(f"request body is nested too deeply (more than {MAX_DEPTH} levels)", hint=hint)
        bad = find_surrogate(body)
        if bad is not None:  # JSON's "\ud800" decodes to a str that no encode() takes later
            raise BadInputError(
                f"{bad} is not valid UTF-8: it holds a lone surrogate (such as \\ud800)",
                field=bad.split(".")[0].split("[")[0].split(" ")[0],
                hint="send text without unpaired surrogates; pair them or remove them",
            )
        return body

    def query(self, name: str, default: str | None = None) -> str | None:
        """A query argument (last one wins)."""
        value: str | None = self.get_query_argument(name, default)
        return value

    def finish_json(self, obj: Any, *, status: int = 200) -> None:
        """Serialise ``obj`` (dataclass with ``to_json``, list, dict) and finish."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(to_jsonable(obj)))

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, ModuleNotFoundError):
            e = missing_dependency(e) or e  # an optional package: a 503 with its install hint
        if isinstance(e, StarverseError):
            status = status_for(e)
            if status >= 500:
                self.log.error("jupyter_starverse: %s", e, exc_info=e)
            else:
                self.log.info("jupyter_starverse: %s %s -> %d: %s", self.request.method, self.request.path, status, e)
            self.send_error(status, exc_info=(type(e), e, e.__traceback__))
            return
        super()._handle_request_exception(e)  # type: ignore[arg-type]

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, StarverseError):
            reply = {
                "error": type(exc).__name__,
                "message": exc.message,
                "hint": exc.hint or _HINTS.get(status_code),
                "field": getattr(exc, "field", None),
            }
        elif isinstance(exc, web.HTTPError):
            reply = {
                "error": "HTTPError",
                "message": exc.log_message or self._reason,
                "hint": _HINTS.get(status_code),
                "field": None,
            }
        else:
            reply = {"error": "InternalError", "message": self._reason, "hint": "see the server log", "field": None}
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply))
