"""``starverse info``: version, store, backend, mode, currency."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._common import add_json_flag

if TYPE_CHECKING:
    from ..client import Info, Starverse

__all__ = ["register"]


def _info(client: Starverse, args: argparse.Namespace) -> Info:
    return client.info()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("info", help="show version, store, backend, mode and currency")
    add_json_flag(p)
    p.set_defaults(run=_info)
