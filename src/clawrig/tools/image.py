"""The ``image`` tool (profile ``full``): send an image file from the sandbox to the model.

OpenClaw's ``image`` tool (parameters image*, prompt, model, maxBytesMb) hands an image to a
vision-capable model. Here the image comes back as image content of the tool result when the
trial's model can see images (``ToolContext.can_see_images``), else as a clear tool error.
Only files inside the sandbox are accepted (no URLs: sandboxes have no network).

Also home of :func:`sniff_image_mime`, shared with ``read``.
"""

from __future__ import annotations

import base64
from typing import Any

from clawrig.tools._common import error, is_agent_os_failure, os_error_text, resolve_path
from clawrig.tools.base import ToolContext, ToolResult

IMAGE_EXTENSIONS = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
DEFAULT_MAX_IMAGE_MB = 10.0
"""Largest image (MiB) the ``image`` tool sends when ``maxBytesMb`` is not given."""

IMAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["image"],
    "properties": {
        "image": {"type": "string"},
        "prompt": {"type": "string"},
        "model": {"type": "string"},
        "maxBytesMb": {"type": "number"},
    },
}
"""Parameters of OpenClaw's ``image`` tool (openclaw-tools.md: image*, prompt, model,
maxBytesMb); not part of the captured 17-tool set, so written here."""


def sniff_image_mime(data: bytes) -> str | None:
    """The MIME type of PNG, JPEG, GIF or WebP bytes from their magic number, else None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_block(data: bytes, mime: str) -> dict[str, str]:
    """A ``ToolResult.images`` entry: ``{"data": base64, "mimeType": mime}``."""
    return {"data": base64.b64encode(data).decode("ascii"), "mimeType": mime}


async def image(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Return the image file ``args["image"]`` as image content (errors: not visible to this
    model, missing file, not an image, larger than ``maxBytesMb`` MiB)."""
    raw = args["image"].strip()
    if "://" in raw or raw.startswith("data:"):
        return error(
            "image: give the path of an image file in the sandbox (URLs are not fetched here)"
        )
    path = resolve_path(raw)
    if not ctx.can_see_images:
        return error(
            f"image: this model cannot see images, so {raw} cannot be shown to it. Inspect the "
            "file with exec instead (e.g. `file`, or python3 to read its size and pixels)."
        )
    max_mb = float(args.get("maxBytesMb") or DEFAULT_MAX_IMAGE_MB)
    if max_mb <= 0:
        return error("image: maxBytesMb must be a positive number of MiB")
    cap = int(max_mb * 1024 * 1024)
    try:
        data = await ctx.sandbox.read_file(path, max_bytes=cap + 1)
    except Exception as exc:
        if is_agent_os_failure(exc):
            return error(f"image: {os_error_text(exc, raw)}")
        raise
    if len(data) > cap:
        return error(
            f"image: {raw} is larger than {max_mb:g} MiB; raise maxBytesMb or shrink the image"
        )
    mime = sniff_image_mime(data)
    if mime is None:
        return error(f"image: {raw} is not a PNG, JPEG, GIF or WebP image")
    note = f"Image {raw} [{mime}, {len(data)} bytes]"
    if args.get("prompt"):
        note += f"\nPrompt: {args['prompt']}"
    details: dict[str, Any] = {"path": path, "mimeType": mime, "bytes": len(data)}
    if args.get("model"):
        details["model"] = args["model"]
        note += f"\n(model {args['model']!r} noted; the image is shown to the current model)"
    return ToolResult(text=note, details=details, images=[image_block(data, mime)])


TOOLS = {"image": image}
