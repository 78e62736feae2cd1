"""Start the reference server as a subprocess on a free port and talk to it over real HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

ERROR_RESPONSE_KEYS = {"object", "message", "type", "param", "code"}  # SGLang's ErrorResponse


def error_message(path: str, body: Any) -> str:
    """The message of a refusal, asserting the body has one of the shapes SGLang gives on that path
    (reference_impl/server/errors.py): /generate ``{"error": {"message"}}``, 0.5.23's contract gate
    ``{"error": "<text>"}``, an ErrorResponse for a body that does not parse and on the OpenAI endpoints."""
    assert isinstance(body, dict), body
    if set(body) == ERROR_RESPONSE_KEYS:
        assert body["object"] == "error" and body["param"] is None and body["code"] == 400, body
        assert body["type"] in ({"Bad Request", "BadRequestError"} if path.startswith("/v1/") else {"Bad Request"})
        return str(body["message"])
    assert path == "/generate" and set(body) == {"error"}, (path, body)
    err = body["error"]
    if isinstance(err, str):
        return err
    assert set(err) == {"message"}, body
    return str(err["message"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, bytes]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def exchange(self, method: str, path: str, body: Any = None) -> tuple[int, str, bytes]:
        """(status, content type, body) of one request."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read()

    def get_json(self, path: str) -> Any:
        status, body = self.request("GET", path)
        assert status == 200, body
        return json.loads(body)

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        status, out = self.request("POST", "/generate", body)
        assert status == 200, out
        result: dict[str, Any] = json.loads(out)
        return result

    def stream(self, path: str, body: dict[str, Any]) -> list[Any]:
        """POST with stream=true; the parsed ``data:`` events, ``[DONE]`` kept as the string."""
        status, out = self.request("POST", path, {**body, "stream": True})
        assert status == 200, out
        events: list[Any] = []
        for block in out.decode().split("\n\n"):
            if block.startswith("data: "):
                payload = block[len("data: ") :]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        return events

    def metric(self, name: str) -> float:
        status, text = self.request("GET", "/metrics")
        assert status == 200
        for line in text.decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)


@contextmanager
def running_server(*args: str, timeout: float = 60.0, metrics: bool = True) -> Iterator[Server]:
    port = free_port()
    cmd = [sys.executable, "-m", "reference_impl.server", "--port", str(port),
           *(["--enable-metrics"] if metrics else []), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server = Server(proc, port)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited early: {proc.stdout.read() if proc.stdout else ''}")
            try:
                if server.request("GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become healthy")
            time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
