"""Token capture for RL: the token ids (and logprobs) the upstream sampled, recorded per request.

Re-tokenising a transcript does not give back the tokens a model sampled (verl's authors saw PPO
fail to converge on re-tokenised data), so when the upstream is an inference server that can
return them, the gateway asks for them and records them in the trial's ``model_calls.jsonl``,
one ``token_capture`` object per request::

    {"prompt_token_ids": [int], "completion_token_ids": [int],
     "completion_logprobs": [float] | null}

(null / absent when the upstream returned no tokens). Which server an endpoint is: its
``server`` setting (:class:`clawrig.llm.providers.ModelEndpoint`), else its provider's name when
that is ``vllm`` or ``sglang``. The request extensions (OpenAI-compatible chat completions):

- vLLM (``return_token_ids`` needs vLLM >= 0.10.2): ``logprobs: true`` and
  ``return_token_ids: true``. The reply carries top-level ``prompt_token_ids``, per choice
  ``token_ids`` and ``logprobs.content[].logprob``; a stream sends ``prompt_token_ids`` in its
  first chunk and the ``token_ids`` / ``logprobs.content`` of each chunk's delta. Without
  ``token_ids`` (older vLLM), ids are read from logprob tokens of the form ``token_id:<id>``
  (``return_tokens_as_token_ids``).
- SGLang (>= 0.5.13): ``logprobs: true``, ``return_prompt_token_ids: true`` and
  ``return_meta_info: true``. Each choice carries ``prompt_token_ids`` and
  ``meta_info.output_token_logprobs`` (``[logprob, token_id, text]`` triples, or objects with
  ``token_id`` / ``logprob``), with ``meta_info.output_ids`` in some releases. SGLang refuses
  these fields on streams, so the gateway asks SGLang for a whole reply and streams it to the
  client itself (:func:`clawrig.llm.gateway.wire.sse_from_completion`).

The extension fields are removed from non-streamed replies unless the client asked for them
(streamed chunks pass through untouched), so agents see plain OpenAI replies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from clawrig.jsonl import jsonl_lines
from clawrig.llm.providers import ModelEndpoint

__all__ = [
    "TOKEN_SERVERS",
    "StreamTokens",
    "TokenServer",
    "capture_fields",
    "capture_server",
    "read_token_capture",
    "strip_capture_fields",
    "tokens_from_completion",
]

TokenServer = Literal["vllm", "sglang"]
"""Inference servers whose OpenAI-compatible API can return sampled token ids."""
TOKEN_SERVERS: tuple[TokenServer, ...] = ("vllm", "sglang")

_VLLM_FIELDS = {"logprobs": True, "return_token_ids": True}
_SGLANG_FIELDS = {"logprobs": True, "return_prompt_token_ids": True, "return_meta_info": True}
_CHOICE_EXTRAS = ("token_ids", "prompt_token_ids", "meta_info")


def capture_server(endpoint: ModelEndpoint | None) -> TokenServer | None:
    """The token server behind ``endpoint``: its ``server`` setting, else the provider's name
    when that is ``vllm`` or ``sglang``; None for any other upstream (no capture)."""
    if endpoint is None:
        return None
    if endpoint.server is not None:
        return endpoint.server
    provider = endpoint.provider.lower()
    return provider if provider in TOKEN_SERVERS else None  # type: ignore[return-value]


def capture_fields(server: TokenServer) -> dict[str, Any]:
    """The request-body fields that make ``server`` return token ids and logprobs."""
    return dict(_VLLM_FIELDS if server == "vllm" else _SGLANG_FIELDS)


def _ints(value: Any) -> list[int] | None:
    """``value`` when it is a list of ints as JSON decodes them (checked on its first item:
    copying or checking each of a long prompt's ids costs more than the rest of the capture)."""
    if not isinstance(value, list) or (value and type(value[0]) is not int):
        return None
    return value


def _token_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token[9:])
        except ValueError:
            return None
    return None


def _from_logprob_content(entries: Any) -> tuple[list[int | None], list[float]]:
    ids: list[int | None] = []
    lps: list[float] = []
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict):
            ids.append(_token_id(e.get("token")))
            lp = e.get("logprob")
            lps.append(float(lp) if isinstance(lp, int | float) else float("nan"))
    return ids, lps


def _sglang_meta(meta: Any) -> tuple[list[int] | None, list[float] | None]:
    if not isinstance(meta, dict):
        return None, None
    entries = meta.get("output_token_logprobs")
    if isinstance(entries, list) and entries:
        ids: list[int] = []
        lps: list[float] = []
        for e in entries:
            if isinstance(e, dict):
                tid, lp = e.get("token_id", e.get("id")), e.get("logprob")
            elif isinstance(e, list | tuple) and len(e) >= 2:
                lp, tid = e[0], e[1]
            else:
                tid = lp = None
            if not isinstance(tid, int) or not isinstance(lp, int | float):
                return _ints(meta.get("output_ids")), None
            ids.append(tid)
            lps.append(float(lp))
        return ids, lps
    return _ints(meta.get("output_ids")), None


def _capture(
    prompt: list[int] | None, completion: list[int] | None, logprobs: list[float] | None
) -> dict[str, Any] | None:
    """The ``token_capture`` object; an id list the reply lacks is None (not ``[]``: an empty
    completion a trainer would train on, helper-211), and logprobs are kept only when they
    line up with completion ids (none without them)."""
    if prompt is None and completion is None:
        return None
    if logprobs is not None and (completion is None or len(logprobs) != len(completion)):
        logprobs = None  # not aligned with the ids: not usable for training
    return {
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "completion_logprobs": logprobs,
    }


def tokens_from_completion(
    server: TokenServer, completion: dict[str, Any]
) -> dict[str, Any] | None:
    """The ``token_capture`` object of a whole (non-streamed) reply from ``server``, for its
    first choice; None when the reply holds no token ids."""
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    if not isinstance(choice, dict):
        return None
    logprob_content = (choice.get("logprobs") or {}).get("content")
    if server == "sglang":
        prompt = _ints(choice.get("prompt_token_ids"))
        if prompt is None:
            prompt = _ints(completion.get("prompt_token_ids"))
        ids, lps = _sglang_meta(choice.get("meta_info"))
        if lps is None and logprob_content is not None:
            lps = _from_logprob_content(logprob_content)[1]
        return _capture(prompt, ids, lps)
    prompt = _ints(completion.get("prompt_token_ids"))
    ids = _ints(choice.get("token_ids"))
    logprobs: list[float] | None = None
    if logprob_content is not None:
        parsed, logprobs = _from_logprob_content(logprob_content)
        if ids is None and parsed and all(i is not None for i in parsed):
            ids = [int(i) for i in parsed if i is not None]
    return _capture(prompt, ids, logprobs)


class StreamTokens:
    """Collects the token ids and logprobs of a streamed vLLM reply, chunk by chunk
    (``feed`` each parsed ``chat.completion.chunk``; ``result()`` gives the
    ``token_capture`` object or None)."""

    __slots__ = ("_ids", "_lps", "_parsed", "_prompt", "_seen_ids", "_seen_lps")

    def __init__(self) -> None:
        self._prompt: list[int] | None = None
        self._ids: list[int] = []
        self._lps: list[float] = []
        self._parsed: list[int | None] = []
        self._seen_ids = False
        self._seen_lps = False

    def feed(self, chunk: dict[str, Any]) -> None:
        """Take one chunk's ``prompt_token_ids`` and its first choice's ``token_ids`` and
        ``logprobs.content``."""
        if self._prompt is None and "prompt_token_ids" in chunk:
            self._prompt = _ints(chunk["prompt_token_ids"])
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                self._seen_ids = True
                self._ids.extend(int(i) for i in ids)
            content = (choice.get("logprobs") or {}).get("content")
            if isinstance(content, list):
                self._seen_lps = True
                parsed, lps = _from_logprob_content(content)
                self._parsed.extend(parsed)
                self._lps.extend(lps)

    def result(self) -> dict[str, Any] | None:
        ids: list[int] | None = self._ids if self._seen_ids else None
        if ids is None and self._parsed and all(i is not None for i in self._parsed):
            ids = [int(i) for i in self._parsed if i is not None]
        return _capture(self._prompt, ids, self._lps if self._seen_lps else None)


def strip_capture_fields(completion: dict[str, Any], client_body: dict[str, Any]) -> None:
    """Remove (in place) the token-capture extensions the client did not ask for: top-level
    ``prompt_token_ids``, each choice's ``token_ids`` / ``prompt_token_ids`` / ``meta_info``,
    and ``logprobs`` unless the client set ``logprobs``."""
    keep_logprobs = bool(client_body.get("logprobs"))
    extras = [k for k in _CHOICE_EXTRAS if not client_body.get(f"return_{k}")]
    if not client_body.get("return_token_ids"):
        completion.pop("prompt_token_ids", None)
    else:
        extras = [k for k in extras if k != "token_ids"]
    for choice in completion.get("choices") or ():
        if isinstance(choice, dict):
            for k in extras:
                choice.pop(k, None)
            if not keep_logprobs:
                choice.pop("logprobs", None)


def read_token_capture(
    trial_dir: Path | str, *, role: str | None = "agent"
) -> list[dict[str, Any]]:
    """The captured tokens of a trial, one entry per answered model request in call order:
    ``{"seq": int, "role": str, "message": the assistant message (OpenAI chat shape),
    "token_capture": {prompt_token_ids, completion_token_ids, completion_logprobs} | None}``.

    ``trial_dir``: a trial folder (its :data:`clawrig.llm.gateway.RECORD_FILE`) or the record
    file itself; ``role``: only requests of that role (``agent``, ``judge``; None: all).
    A trial without a record file gives []. Raises UserError naming the file and line for a
    line that is not JSON.
    """
    from clawrig.llm.gateway.replay import RECORD_FILE

    p = Path(trial_dir)
    path = p / RECORD_FILE if p.is_dir() else p
    if not path.is_file():
        return []
    out: list[dict[str, Any]] = []
    for n, line in enumerate(jsonl_lines(path.read_text(encoding="utf-8")), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            from clawrig.errors import UserError

            raise UserError(f"{path}:{n}: recorded model calls: not a JSON line") from None
        if not isinstance(rec, dict) or rec.get("status") != 200:
            continue
        if role is not None and rec.get("role") != role:
            continue
        response = rec.get("response") or {}
        choices = response.get("choices") or [{}]
        out.append(
            {
                "seq": rec.get("seq"),
                "role": rec.get("role"),
                "message": (choices[0] or {}).get("message"),
                "token_capture": rec.get("token_capture"),
            }
        )
    return out
