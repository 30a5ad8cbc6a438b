"""Every route and every verb of the extension refuses requests without a token (403)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from jupyter_server.serverapp import ServerApp
from tornado.httpclient import HTTPClientError
from tornado.web import RequestHandler

from jupyter_starverse.server._base import StarverseHandler
from jupyter_starverse.server._routes import NAMESPACE, make_handlers

VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _implemented(handler: type[RequestHandler]) -> list[str]:
    return [v for v in VERBS if getattr(handler, v.lower()) is not getattr(RequestHandler, v.lower())]


def _example_path(pattern: str) -> str:
    # Fill every capture group with a harmless value so the route matches.
    return re.sub(r"\([^()]*\)", "x", pattern).rstrip("$")


def _routes() -> list[tuple[str, str]]:
    out = []
    for pattern, handler in make_handlers():
        assert issubclass(handler, StarverseHandler), f"{handler.__name__} must subclass StarverseHandler"
        out.extend((_example_path(pattern), verb) for verb in _implemented(handler))
    return out


def test_there_are_routes_to_check() -> None:
    assert ("/jupyter-starverse/info", "GET") in _routes()


def _served_patterns(router: Any) -> list[str]:
    out: list[str] = []
    for rule in getattr(router, "rules", []):
        if hasattr(rule.target, "rules"):
            out.extend(_served_patterns(rule.target))
        elif NAMESPACE in getattr(rule.matcher, "regex", re.compile("")).pattern:
            out.append(rule.matcher.regex.pattern)
    return out


async def test_the_server_serves_exactly_our_route_table(jp_serverapp: ServerApp) -> None:
    # What the auth test below checks is what the server really serves, nothing more or less.
    assert len(set(_served_patterns(jp_serverapp.web_app.default_router))) == len(make_handlers())


@pytest.mark.parametrize(("path", "verb"), _routes())
async def test_verb_requires_authentication(jp_fetch: Any, path: str, verb: str) -> None:
    kwargs: dict[str, Any] = {"method": verb, "headers": {"Authorization": ""}}
    if verb in ("POST", "PUT", "PATCH"):
        kwargs["body"] = "{}"
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*path.strip("/").split("/"), **kwargs)
    assert info.value.code == 403, f"{verb} {path} answered {info.value.code} without a token"
