"""image (profile full): an image file from the sandbox as image content, or a clear error."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

from clawrig.tools import Toolset


def png_bytes(width: int, height: int) -> bytes:
    """A valid grey PNG built by hand (signature, IHDR, IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 0))
        + chunk(b"IEND", b"")
    )


async def test_image_is_sent_when_the_model_can_see(call, ctx, workspace: Path) -> None:
    data = png_bytes(4, 4)
    (workspace / "shots").mkdir()
    (workspace / "shots/a.png").write_bytes(data)
    gif = b"GIF89a" + b"\x01\x00\x01\x00\x00\x00\x00;"
    (workspace / "b.gif").write_bytes(gif)
    ctx.can_see_images = True
    r = await call("image", {"image": "shots/a.png", "prompt": "what colour?"})
    assert not r.is_error
    assert r.text == f"Image shots/a.png [image/png, {len(data)} bytes]\nPrompt: what colour?"
    assert r.images == [{"data": base64.b64encode(data).decode(), "mimeType": "image/png"}]
    assert r.details == {
        "path": "/tmp_workspace/shots/a.png",
        "mimeType": "image/png",
        "bytes": len(data),
    }
    r = await call("image", {"image": "/tmp_workspace/b.gif", "model": "vision-1"})
    assert r.images[0]["mimeType"] == "image/gif" and r.details["model"] == "vision-1"


async def test_image_errors(call, ctx, workspace: Path) -> None:
    (workspace / "a.png").write_bytes(png_bytes(4, 4))
    r = await call("image", {"image": "a.png"})
    assert r.is_error
    assert r.text.startswith("image: this model cannot see images, so a.png cannot be shown")
    ctx.can_see_images = True
    (workspace / "fake.png").write_text("not an image")
    r = await call("image", {"image": "fake.png"})
    assert r.is_error and r.text == "image: fake.png is not a PNG, JPEG, GIF or WebP image"
    r = await call("image", {"image": "none.png"})
    assert r.is_error and r.text == "image: File not found: none.png"
    big = png_bytes(1100, 1000)  # over 1 MiB: stored without compression
    assert len(big) > 1024 * 1024
    (workspace / "big.png").write_bytes(big)
    r = await call("image", {"image": "big.png", "maxBytesMb": 1})
    assert (
        r.is_error
        and r.text == "image: big.png is larger than 1 MiB; raise maxBytesMb or shrink the image"
    )
    r = await call("image", {"image": "https://example.org/a.png"})
    assert r.is_error and r.text.startswith("image: give the path of an image file in the sandbox")
    r = await call("image", {})
    assert r.is_error and "missing required argument `image`" in r.text


async def test_image_is_only_in_the_full_profile(ctx) -> None:
    r = await Toolset("coding").call(ctx, "image", '{"image": "a.png"}')
    assert r.is_error and r.text.startswith("Tool 'image' not found.")
