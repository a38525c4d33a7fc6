"""The web page at `/`: plain HTML, CSS and JavaScript shipped in `web/`, served by the gateway
itself (nothing from a CDN). The files hold no data, so they answer without a key; every call
the page makes to the API carries the key it asks for (kept in the tab's session storage)."""

from __future__ import annotations

from pathlib import Path

from litestar import Response, get
from litestar.exceptions import NotFoundException

__all__ = ["web_asset", "web_page"]

_WEB = Path(__file__).with_name("web")
_ASSETS = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
# The page loads nothing from elsewhere and talks to this server only.
_PAGE_HEADERS = {
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
}
PAGE = {"public": True}  # the page holds no data: its API calls carry the key


@get("/", opt=PAGE, include_in_schema=False)
async def web_page() -> Response[bytes]:
    """The web page (status, routes, playground, live figures): plain HTML, CSS and JS."""
    html = (_WEB / "index.html").read_bytes()
    return Response(html, media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)


@get("/ui/{name:str}", opt=PAGE, include_in_schema=False)
async def web_asset(name: str) -> Response[bytes]:
    if name not in _ASSETS:  # a fixed list: no path ever reaches the file system
        raise NotFoundException()
    return Response((_WEB / name).read_bytes(), media_type=_ASSETS[name], headers=_PAGE_HEADERS)
