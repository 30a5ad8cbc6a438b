"""Loopback HTTP servers for catalog tests and the benchmark.

``HubServer`` speaks enough of the Hugging Face Hub API for the real ``huggingface_hub``
client (``HF_ENDPOINT``): repo info by revision, recursive tree listing, and
``HEAD``/``GET`` on ``resolve`` with ``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag`` and
``X-Linked-Size`` and ``Range`` support, for model and dataset repos. ``FileServer`` is a
plain HTTP file server with HTML folder listings (what fsspec's http filesystem reads). Both
count every complete ``GET`` per file, every body byte sent (in total, per file and per
range), limit each response (each connection) to ``throttle`` bytes per second like a CDN,
and inject faults through ``fault(key, start, end)``: ``"503"``, ``"reset"`` (half the range,
then the connection drops), ``"norange"`` (the whole file with 200, as if Range were not
supported), ``"etag"`` (another ETag, as if the file changed between ranges) or ``"redirect"``
(a 302 to the same file under ``/_moved/``).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

BLOCK = 1024 * 1024


class Blob:
    """File content: real bytes, or a generated stream of ``size`` bytes (no memory needed)."""

    def __init__(self, data: bytes | None = None, *, size: int | None = None, seed: int = 0) -> None:
        self.data = data
        self.size = len(data) if data is not None else int(size or 0)
        self.seed = seed
        # the seed's digest repeated, only as long as the file needs (100,000 small blobs fit in memory)
        reps = -(-min(self.size, BLOCK) // 32)
        self._block = hashlib.sha256(str(seed).encode()).digest() * reps if data is None else b""
        self.declared_size: int | None = None  # lie about the size (source "changes" mid-pull)

    def read(self, start: int, end: int) -> bytes:
        if self.data is not None:
            return self.data[start:end]
        out = bytearray()
        pos = start
        while pos < end:
            off = pos % BLOCK
            n = min(BLOCK - off, end - pos)
            out += self._block[off : off + n]
            pos += n
        return bytes(out)

    def chunks(self, start: int = 0, size: int = BLOCK) -> object:
        pos = start
        while pos < self.size:
            yield self.read(pos, min(self.size, pos + size))
            pos += size

    def sha256(self) -> str:
        h = hashlib.sha256()
        for c in self.chunks():
            h.update(c)  # type: ignore[arg-type]
        return h.hexdigest()

    def git_sha1(self) -> str:
        h = hashlib.sha1(f"blob {self.size}\0".encode())
        for c in self.chunks():
            h.update(c)  # type: ignore[arg-type]
        return h.hexdigest()


class _Base:
    def __init__(self) -> None:
        self.downloads: Counter[str] = Counter()
        self.bytes_sent = 0
        self.sent_by_file: Counter[str] = Counter()
        self.ranges: list[tuple[str, int, int, int]] = []  # [file, start, end, bytes sent] per GET
        self.gets: list[tuple[str, int, int, int]] = []  # (file, start, end, others sending) per GET, in order
        self.throttle: float | None = None  # bytes per second per response (per connection)
        self.link: float | None = None  # bytes per second for all responses together (one shared link)
        self._link_free = 0.0  # monotonic time when the shared link can take the next block
        self.fault: Callable[[str, int, int], str | None] | None = None
        self.active = 0  # responses sending a body right now
        self.max_active = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> _Base:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                server.handle(self, head=True)

            def do_GET(self) -> None:
                if self.path == "/_stats":  # counters for a server running in another process
                    with server._lock:
                        stats = {"downloads": dict(server.downloads), "bytes_sent": server.bytes_sent}
                    return server.send_json(self, stats)
                if self.path == "/_reset":
                    server.reset_counts()
                    return server.send_json(self, {})
                server.handle(self, head=False)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # clients closing keep-alive connections early are normal here

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def reset_counts(self) -> None:
        with self._lock:
            self.downloads.clear()
            self.bytes_sent = 0
            self.sent_by_file.clear()
            self.ranges.clear()
            self.gets.clear()
            self.max_active = 0

    def _count(self, key: str, record: list[object], n: int, download: int) -> None:
        with self._lock:
            self.bytes_sent += n
            self.sent_by_file[key] += n
            record[3] = int(record[3]) + n  # type: ignore[call-overload]
            if download:
                self.downloads[key] += download

    def handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- helpers -------------------------------------------------------------------
    @staticmethod
    def send_json(
        h: BaseHTTPRequestHandler, data: object, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        body = json.dumps(data).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def send_error_code(self, h: BaseHTTPRequestHandler, status: int, code: str) -> None:
        self.send_json(h, {"error": code}, status, {"X-Error-Code": code})

    def send_blob(
        self, h: BaseHTTPRequestHandler, key: str, blob: Blob, headers: dict[str, str], *, head: bool
    ) -> None:
        start, end = 0, blob.size
        status = 200
        rng = h.headers.get("Range")
        m = re.match(r"bytes=(\d+)-(\d*)", rng or "")
        if m:
            start = int(m.group(1))
            end = min(blob.size, int(m.group(2)) + 1) if m.group(2) else blob.size
            status = 206
        action = None if head or self.fault is None else self.fault(key, start, end)
        if action is not None and action.isdigit():  # "503", "404", "403", ...
            return self.send_error_code(h, int(action), "Injected")
        if action == "redirect":  # to the same file under another path, as the Hub sends LFS files to its CDN
            body = b"moved"
            h.send_response(302)
            h.send_header("Location", f"/_moved{urlsplit(h.path).path}")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return None
        if action == "norange":
            m, start, end, status = None, 0, blob.size, 200
        if action == "etag":
            headers = {**headers, "ETag": '"changed-' + str(start) + '"'}
        cut = start + (end - start) // 2 if action == "reset" else None
        length = blob.declared_size if blob.declared_size is not None and not m else end - start
        h.send_response(status)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(length))
        h.send_header("Accept-Ranges", "bytes")
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{blob.size}")
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if head:
            return
        pos = start
        t0 = time.monotonic()
        record = [key, start, end, 0]  # bytes of this GET, updated as they go
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.ranges.append(record)  # type: ignore[arg-type]
            self.gets.append((key, start, end, self.active - 1))
        try:
            while pos < (end if cut is None else cut):
                slow = self.throttle is not None or self.link is not None
                n = min(64 * 1024 if slow else BLOCK, (end if cut is None else cut) - pos)
                if self.link:
                    with self._lock:
                        now = time.monotonic()
                        at = max(now, self._link_free)
                        self._link_free = at + n / self.link
                    if at > now:
                        time.sleep(at - now)
                data = blob.read(pos, pos + n)
                complete = start == 0 and pos + n == blob.size and cut is None
                self._count(key, record, n, 1 if complete else 0)  # before the client can have them: no race
                try:
                    h.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self._count(key, record, -n, -1 if complete else 0)  # never arrived
                    raise
                pos += n
                if self.throttle:
                    ahead = (pos - start) / self.throttle - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
            if blob.declared_size is not None and blob.declared_size > end - start:
                h.close_connection = True  # body shorter than announced: the source "changed"
            if cut is not None:  # a reset in the middle of the range
                h.wfile.flush()
                h.connection.shutdown(socket.SHUT_RDWR)
                h.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True
            return
        finally:
            with self._lock:
                self.active -= 1


class HubServer(_Base):
    """A Hugging Face Hub stand-in holding model repos in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[str, dict[str, str]] = {}  # repo -> revision -> commit
        self.commits: dict[str, dict[str, Blob]] = {}
        self.lfs: set[str] = set()  # "commit/path" served as LFS files
        self.tree_page = 1000  # entries per page of the tree listing (the Hub pages it too)
        self.tree_pages = 0  # pages of the tree listing served
        self._listings: dict[tuple[str, str, bool, bool], list[dict[str, object]]] = {}

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, Blob],
        *,
        revision: str = "main",
        lfs_min: int = 1024,
        repo_type: str = "model",
    ) -> str:
        """Publish ``files`` as a commit of ``repo_id`` (``repo_type`` ``dataset``: a dataset repo)."""
        if repo_type == "dataset":
            repo_id = f"datasets/{repo_id}"
        h = hashlib.sha1(repo_id.encode())
        for path, blob in sorted(files.items()):
            h.update(f"{path}:{blob.size}:{blob.seed}:{blob.data[:64] if blob.data else b''}".encode())
        commit = h.hexdigest()
        self.commits[commit] = dict(files)
        self.refs.setdefault(repo_id, {})[revision] = commit
        self.refs[repo_id][commit] = commit
        for path, blob in files.items():
            if blob.size >= lfs_min:
                self.lfs.add(f"{commit}/{path}")
        self._oids: dict[str, tuple[str, str]] = getattr(self, "_oids", {})
        for path, blob in files.items():
            self._oids[f"{commit}/{path}"] = (blob.git_sha1(), blob.sha256())
        return commit

    def handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        path = urlsplit(h.path).path
        m = re.match(r"^/api/(models|datasets)/([^/]+/[^/]+)/revision/(.+)$", path)
        if m:
            repo, rev = _repo_key(m.group(1), m.group(2)), unquote(m.group(3))
            if repo not in self.refs:
                return self.send_error_code(h, 404, "RepoNotFound")
            commit = self.refs[repo].get(rev)
            if commit is None:
                return self.send_error_code(h, 404, "RevisionNotFound")
            siblings = [{"rfilename": p} for p in sorted(self.commits[commit])]
            name = repo.removeprefix("datasets/")
            info = {"id": name, "modelId": name, "sha": commit, "siblings": siblings, "private": False}
            return self.send_json(h, info)
        m = re.match(r"^/api/(models|datasets)/([^/]+/[^/]+)/tree/([^/]+)(/.*)?$", path)
        if m:
            repo, rev = _repo_key(m.group(1), m.group(2)), unquote(m.group(3))
            commit = self.refs.get(repo, {}).get(rev)
            if commit is None:
                return self.send_error_code(h, 404, "RevisionNotFound" if repo in self.refs else "RepoNotFound")
            return self._tree(h, repo, rev, commit, unquote(m.group(4) or "").strip("/"))
        m = re.match(r"^/((?:datasets/)?[^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            repo, rev, file = m.group(1), unquote(m.group(2)), unquote(m.group(3))
            commit = self.refs.get(repo, {}).get(rev)
            if commit is None:
                return self.send_error_code(h, 404, "RevisionNotFound" if repo in self.refs else "RepoNotFound")
            blob = self.commits[commit].get(file)
            if blob is None:
                return self.send_error_code(h, 404, "EntryNotFound")
            git, sha = self._oids[f"{commit}/{file}"]
            headers = {"X-Repo-Commit": commit, "ETag": f'"{git}"'}
            if f"{commit}/{file}" in self.lfs:
                headers.update({"X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(blob.size), "ETag": f'"{sha}"'})
            return self.send_blob(h, f"{repo}/{file}", blob, headers, head=head)
        return self.send_error_code(h, 404, "RepoNotFound")

    def _tree(self, h: BaseHTTPRequestHandler, repo: str, rev: str, commit: str, under: str) -> None:
        """The tree listing as the Hub serves it: one folder (``recursive=true``: all below it), sizes,
        git oids and LFS sha256 of every file, ``tree_page`` entries a page with a ``Link: rel=next``
        cursor (what ``HfApi.list_repo_tree`` follows); ``expand=true`` adds each entry's last commit."""
        query = parse_qs(urlsplit(h.path).query)
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        expand = query.get("expand", ["false"])[0].lower() == "true"
        cursor = int(query.get("cursor", ["0"])[0] or 0)
        key = (commit, under, recursive, expand)
        out = self._listings.get(key)
        if out is None:
            out = self._listing(commit, under, recursive, expand)
            if out is None:
                return self.send_error_code(h, 404, "EntryNotFound")
            if len(out) > 2000:  # a benchmark's 100,000 files: built once, not once per page (tests edit small ones)
                self._listings[key] = out
        page = out[cursor : cursor + self.tree_page]
        headers: dict[str, str] = {}
        if cursor + self.tree_page < len(out):
            kept = {k: v[0] for k, v in query.items() if k != "cursor"}
            nxt = f"{self.url}{urlsplit(h.path).path}?{urlencode({**kept, 'cursor': cursor + self.tree_page})}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self.tree_pages += 1
        return self.send_json(h, page, headers=headers)

    def _listing(self, commit: str, under: str, recursive: bool, expand: bool) -> list[dict[str, object]] | None:
        prefix = f"{under}/" if under else ""
        entries: dict[str, dict[str, object]] = {}
        for p, blob in sorted(self.commits[commit].items()):
            if not p.startswith(prefix):
                continue
            rest = p[len(prefix) :].split("/")
            for i in range(1, len(rest) if recursive else min(2, len(rest))):
                d = prefix + "/".join(rest[:i])
                entries.setdefault(d, {"type": "directory", "path": d, "size": 0, "oid": "0" * 40})
            if len(rest) > 1 and not recursive:
                continue
            git, sha = self._oids[f"{commit}/{p}"]
            item: dict[str, object] = {"type": "file", "path": p, "size": blob.size, "oid": git}
            if f"{commit}/{p}" in self.lfs:
                item["lfs"] = {"oid": sha, "size": blob.size, "pointerSize": 134}
            entries[p] = item
        if not entries and under:
            return None
        out = list(entries.values())
        if expand:
            for item in out:
                item["lastCommit"] = {"id": commit, "title": "commit", "date": "2026-01-01T00:00:00.000Z"}
        return out


def _repo_key(kind: str, repo: str) -> str:
    return repo if kind == "models" else f"datasets/{repo}"


class FileServer(_Base):
    """Plain HTTP files under folders; ``GET /folder/`` returns an HTML listing."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, Blob] = {}
        self.on_get: Callable[[str], None] | None = None

    def add(self, path: str, blob: Blob) -> str:
        self.files[path.lstrip("/")] = blob
        return f"{self.url}/{path.lstrip('/')}"

    def handle(self, h: BaseHTTPRequestHandler, *, head: bool) -> None:
        path = unquote(urlsplit(h.path).path).lstrip("/")
        path = path.removeprefix("_moved/")  # where a "redirect" fault sends the client
        if path in self.files:
            blob = self.files[path]
            if self.on_get is not None and not head:
                self.on_get(path)
            etag = hashlib.sha1(f"{path}:{blob.size}:{blob.seed}".encode()).hexdigest()
            return self.send_blob(h, path, blob, {"ETag": f'"{etag}"'}, head=head)
        prefix = path.rstrip("/") + "/" if path else ""
        children = sorted(
            {
                p[len(prefix) :].split("/", 1)[0] + ("/" if "/" in p[len(prefix) :] else "")
                for p in self.files
                if p.startswith(prefix)
            }
        )
        if not children or (path and not path.endswith("/")):
            h.send_response(404)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        body = "<html><body>" + "".join(f'<a href="{c}">{c}</a>\n' for c in children) + "</body></html>"
        data = body.encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if not head:
            h.wfile.write(data)


def main(argv: list[str]) -> None:
    """Serve in this process: ``python -m tests.catalog.servers SPEC_JSON``; prints the URL.

    SPEC: ``{"hub": {"org/repo": {"file": [size, seed]}}, "files": {"path": [size, seed]}}``
    (one of the two keys), and optionally ``"throttle"``: bytes per second per connection.
    ``@FILE`` reads the SPEC from a file (large listings).
    """
    text = argv[0]
    if text.startswith("@"):
        with open(text[1:]) as f:
            text = f.read()
    spec = json.loads(text)
    server: _Base
    if "hub" in spec:
        hub = HubServer().start()
        for repo, files in spec["hub"].items():
            hub.add_repo(repo, {p: Blob(size=s, seed=seed) for p, (s, seed) in files.items()})
        server = hub
    else:
        fsv = FileServer().start()
        for p, (size, seed) in spec["files"].items():
            fsv.add(p, Blob(size=size, seed=seed))
        server = fsv
    server.throttle = spec.get("throttle")
    print(server.url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
