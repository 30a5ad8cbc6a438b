"""Small files over a few kept-alive connections from one loop: faults, redirects, bad bytes (issue 33)."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from jupyter_starverse.catalog._download import AccessError, ChecksumError, Downloaded, Target
from jupyter_starverse.catalog._multiget import Get, GetFailed, fetch_many
from tests.catalog.servers import Blob, FileServer


def _serve(files: FileServer, n: int) -> dict[str, Blob]:
    blobs = {f"d/f{i:02d}.bin": Blob(size=3000 + 97 * i, seed=300 + i) for i in range(n)}
    for p, b in blobs.items():
        files.add(p, b)
    return blobs


def _gets(files: FileServer, blobs: dict[str, Blob], wrong: str = "") -> list[Get]:
    return [
        Get(f"{files.url}/{p}", Target(p, b.size, "0" * 64 if p == wrong else b.sha256()), p) for p, b in blobs.items()
    ]


def test_every_file_arrives_whole_over_at_most_n_connections_through_faults_and_redirects(files: FileServer) -> None:
    blobs = _serve(files, 40)
    faults = {"d/f03.bin": ["503", "503"], "d/f07.bin": ["reset"], "d/f09.bin": ["redirect"], "d/f21.bin": ["redirect"]}
    files.fault = lambda key, start, end: faults[key].pop(0) if faults.get(key) else None
    got: dict[str, bytes] = {}

    def done(get: Get, body: memoryview, out: Downloaded) -> None:
        assert out.sha256 == hashlib.sha256(body).hexdigest()
        got[get.key] = bytes(body)

    fetch_many(_gets(files, blobs), headers={"User-Agent": "t"}, connections=4, done=done)
    assert got == {p: b.read(0, b.size) for p, b in blobs.items()}
    assert files.max_active <= 4
    assert not any(faults.values())  # every fault was met and got past
    assert Counter(files.downloads) == Counter(dict.fromkeys(blobs, 1))  # each file came whole once


def test_a_missing_file_stops_the_batch_with_its_name(files: FileServer) -> None:
    blobs = _serve(files, 10)
    files.fault = lambda key, start, end: "404" if key == "d/f05.bin" else None
    with pytest.raises(GetFailed) as e:
        fetch_many(_gets(files, blobs), headers={}, connections=3, done=lambda *a: None)
    assert e.value.get.key == "d/f05.bin" and isinstance(e.value.error, AccessError) and e.value.error.status == 404


def test_bytes_that_do_not_match_the_listing_are_refused(files: FileServer) -> None:
    blobs = _serve(files, 6)
    seen: list[str] = []
    with pytest.raises(GetFailed) as e:
        fetch_many(
            _gets(files, blobs, wrong="d/f02.bin"), headers={}, connections=1, done=lambda g, b, o: seen.append(g.key)
        )
    assert isinstance(e.value.error, ChecksumError) and "d/f02.bin" not in seen
