"""Request guards that run before routing: body size (413) and content type (415)."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import PROBLEM, TYPE_BASE

BODY_METHODS = {"POST", "PUT", "PATCH"}


class BodyGuard:
    """Refuses bodies over ``max_bytes`` (413) and bodies that are not JSON (415)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        # Header values are bytes of any kind (latin-1, as HTTP and Starlette read them).
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await _problem(send, 413, "too-large", "Request body too large",
                           f"the body has {length} bytes; the limit is {self.max_bytes}")
            return
        has_body = (length not in (None, "0")) or "transfer-encoding" in headers
        media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        is_json = media == "application/json" or media.endswith("+json")
        if has_body and not is_json and not scope["path"].startswith("/ui"):
            await _problem(send, 415, "unsupported-media-type", "Unsupported media type",
                           f"send JSON with Content-Type: application/json (got {media or 'none'})")
            return
        # The body is read here, up to the limit, before the app parses any of it: a body sent
        # without its length (chunked) is refused as too large, not as JSON that did not parse.
        messages: list[Message] = []
        received, more = 0, has_body
        while more:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                await _problem(send, 413, "too-large", "Request body too large",
                               f"the body exceeds the limit of {self.max_bytes} bytes")
                return
            more = message.get("more_body", False)

        async def replayed() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replayed, send)


async def _problem(send: Send, status: int, slug: str, title: str, detail: str) -> None:
    body = json.dumps({"type": TYPE_BASE + slug, "title": title, "status": status,
                       "detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", PROBLEM.encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
