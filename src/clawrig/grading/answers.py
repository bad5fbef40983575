"""Deterministic answer checker: a judge-free alternative to the DataClawBench LLM judge.

It extracts the final answer from the agent's final text (``Transcript.final_text()``: the
LAST assistant message with any text), compares it with the task's gold ``answer`` (a scalar or
a list of L parts, numbers sometimes stored as strings; shared/reference/formats.md section 3)
and returns a :class:`~clawrig.spec.trial.Score` of the same shape as the judge's
(shared/reference/metrics.md): single answer ``subscores == {"match": 0|1}``, list answer
``subscores == {"part_0": 0|1, ..., "part_{L-1}": 0|1}``, ``score = sum / L``.

Rules (documented here because they decide scores):

* Numbers are equal at the precision the guidelines ask for: "保留4位小数", "2 decimal places",
  "rounded to 4 decimal places", "two decimal places", "integer"/"整数" (0 decimals). With d
  decimals the predicted value must be within half a unit of the last asked decimal of the gold
  value, ``|pred - gold| <= 0.5 * 10**-d`` (so an unrounded 0.11423 matches 0.1142 at 4
  decimals, 0.11 does not). When the guidelines name several precisions (hard001: "相关系数保留4
  位小数，差值保留2位小数") each gold part uses the one equal to its own written decimals, else
  the smallest asked precision at least as fine, else the finest asked. A stated tolerance
  ("tolerance 0.01", "误差0.01") is an absolute tolerance. Without either, a relative tolerance
  of 1e-6 applies.
* Percentages: a value written with a percent sign may be read either at face value or divided
  by 100 (``"12.5%"`` matches gold ``12.5`` and gold ``0.125``; gold ``"12.5%"`` matches
  ``12.5``, ``12.5%`` and ``0.125``). A bare number is read as written: ``0.125`` does NOT match
  gold ``12.5`` (DataClawBench states percentages in percent units, so a fraction is a
  different answer).
* Strings are equal after Unicode NFKC, case folding and whitespace folding (runs of
  whitespace -> one space, ends stripped), with surrounding quotes and trailing sentence
  punctuation removed. No synonyms: "Jiangsu" is not "Jiangsu Province" (that is what the judge
  is for).
* Extraction of a list answer: the last bracketed list with L elements (JSON, then Python
  literal, then a bracketed list of unquoted items); else the text split on commas (thousands
  separators kept), "、", semicolons, or lines, when that gives exactly L parts. A list that
  cannot be split into L parts scores every part 0 (the rubric's rule), which is a score, not
  an error. A numeric part is the last number in its text.
* Extraction of a scalar answer: a JSON scalar or one-element list when the whole text is one;
  else the text after the last "Answer:"/"Final answer:"/"答案：" marker; else the whole text
  (strings) or, for numbers, the last non-empty line when the text holds several numbers. When
  the chosen segment holds several numbers the last one is used and ``details["ambiguous"]`` is
  set.

A transcript whose assistant message has ``stopReason == "error"`` is an agent run error
(formats.md section 3): the checker returns a Score with ``error`` set and ``score`` None.
"""

from __future__ import annotations

import ast
import json
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from clawrig.grading.textscan import balanced_spans
from clawrig.spec.task import Task
from clawrig.spec.transcript import Transcript
from clawrig.spec.trial import Score

__all__ = [
    "NumberMatch",
    "Precision",
    "agent_run_error",
    "answer_keys",
    "check_answer",
    "combine",
    "compare_answer",
    "extract_parts",
    "find_numbers",
    "fold",
    "normalize_text",
    "numbers_equal",
    "parse_number",
    "parse_precision",
]

# --------------------------------------------------------------------------------------------
# Text normalisation and number finding (shared with clawrig.grading.process)
# --------------------------------------------------------------------------------------------

_QUOTE_MAP = str.maketrans(
    {
        "\u201c": '"',
        "\u201d": '"',
        "\u2018": "'",
        "\u2019": "'",
        "\u300c": '"',
        "\u300d": '"',
        "\u300e": '"',
        "\u300f": '"',
        "\u2212": "-",  # minus sign
        "\u2013": "-",  # en dash
        "\u2014": "-",  # em dash
        "\u3001": "、",
    }
)


def normalize_text(text: str) -> str:
    """NFKC-normalise ``text`` and map typographic quotes and minus signs to ASCII.

    Full-width digits, commas, brackets and percent signs become ASCII under NFKC; curly quotes
    (“”‘’), corner brackets (「」『』) and U+2212 minus are mapped explicitly.
    """
    return unicodedata.normalize("NFKC", text).translate(_QUOTE_MAP)


_WS = re.compile(r"\s+")


def fold(text: str) -> str:
    """Fold a string for comparison: NFKC, case folding, whitespace runs -> one space, stripped."""
    return _WS.sub(" ", normalize_text(text).casefold()).strip()


@dataclass(frozen=True)
class NumberMatch:
    """A number found in text: ``value`` as written (percent sign not applied), ``decimals``
    written after the point, ``percent`` when followed by ``%``, ``start``/``end`` offsets."""

    value: float
    decimals: int
    percent: bool
    start: int
    end: int
    text: str


# A number not glued to a preceding digit, point or ASCII letter ("CR3", "x2" are names; the
# "-" in "2020-2022" is a range, not a sign). Thousands separators: 1,009,833,229,861.02.
_NUMBER_RE = re.compile(
    r"(?<![0-9A-Za-z._])"
    r"(?=[-+]?\.?\d)"
    r"(?P<sign>[-+])?"
    r"(?P<int>\d{1,3}(?:,\d{3})+(?![\d])|\d+)?"
    r"(?P<frac>\.\d+)?"
    r"(?:[eE](?P<exp>[-+]?\d+))?"
    r"(?P<pct>\s?%)?"
)


def find_numbers(text: str) -> list[NumberMatch]:
    """All numbers in ``text`` (already any language: Chinese around digits is fine).

    Handles signs (ASCII and U+2212), thousands separators, decimals, exponents and a trailing
    percent sign. A sign directly after an ASCII digit or letter is read as an operator or a
    range dash ("2020-2022" gives 2020 and 2022); after Chinese text it is a sign
    ("系数为-0.2132" gives -0.2132).
    Offsets refer to ``text`` itself (the text is not re-normalised here beyond the minus sign,
    so callers that need offsets pass the text they will slice).
    """
    text = text.replace("\u2212", "-").replace("\uff05", "%")
    out: list[NumberMatch] = []
    for m in _NUMBER_RE.finditer(text):
        int_part, frac = m.group("int"), m.group("frac")
        if not int_part and not frac:
            continue
        sign = m.group("sign") or ""
        raw = f"{sign}{(int_part or '0').replace(',', '')}{frac or ''}"
        exp = m.group("exp")
        if exp:
            raw += f"e{exp}"
        try:
            value = float(raw)
        except ValueError:  # pragma: no cover - the regex only admits valid floats
            continue
        if not math.isfinite(value):
            continue
        out.append(
            NumberMatch(
                value=value,
                decimals=len(frac) - 1 if frac and not exp else 0,
                percent=bool(m.group("pct")),
                start=m.start(),
                end=m.end(),
                text=m.group(0),
            )
        )
    return out


def parse_number(value: Any) -> NumberMatch | None:
    """Read a gold or predicted part as a number when it is ONE number and nothing else.

    Accepts int/float (not bool) and strings like ``"4444.61"``, ``"-0.16"``, ``"12.5%"``,
    ``"1,596.76"``. Returns None for anything else (``"北京市"``, ``"3 provinces"``).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if not math.isfinite(float(value)):
            return None
        text = repr(value) if isinstance(value, float) else str(value)
        decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 0
        return NumberMatch(float(value), decimals, False, 0, len(text), text)
    if not isinstance(value, str):
        return None
    text = normalize_text(value).strip().strip("\"'").strip()
    nums = find_numbers(text)
    if len(nums) == 1 and nums[0].start == 0 and nums[0].end == len(text):
        return nums[0]
    return None


# --------------------------------------------------------------------------------------------
# Precision from the guidelines
# --------------------------------------------------------------------------------------------

_WORD_DIGITS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "零": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
    "十": 10,
}
_NUMWORD = r"(\d+|zero|one|two|three|four|five|six|seven|eight|nine|ten|[零一二两三四五六七八九十])"
_DECIMALS_RES = [
    re.compile(_NUMWORD + r"\s*decimal(?:\s+place)?s?", re.I),
    re.compile(r"保留\s*(?:小数点后)?\s*" + _NUMWORD + r"\s*位(?:小数)?"),
    re.compile(r"精确到\s*(?:小数点后)?\s*" + _NUMWORD + r"\s*位"),
    re.compile(_NUMWORD + r"\s*位小数"),
]
_PRECISE_TO_RE = re.compile(r"(?:精确到|accurate to|to the nearest)\s*(0\.0*1)\b", re.I)
_INTEGER_RE = re.compile(r"\binteger\b|整数|取整", re.I)
_TOLERANCE_RES = [
    re.compile(r"tolerance\s*(?:of|:|=)?\s*(?:±|\+/-|\+-)?\s*(\d+(?:\.\d+)?)", re.I),
    re.compile(r"误差\s*(?:不超过|小于|在|为|:|：)?\s*(?:±|\+/-)?\s*(\d+(?:\.\d+)?)"),
    re.compile(r"within\s*(?:±|\+/-|\+-)\s*(\d+(?:\.\d+)?)", re.I),
]


@dataclass(frozen=True)
class Precision:
    """What the guidelines ask for: ``decimals`` (in order of mention, deduplicated),
    ``integer`` when an integer is asked, ``tolerance`` an absolute tolerance when stated."""

    decimals: tuple[int, ...] = ()
    integer: bool = False
    tolerance: float | None = None

    def decimals_for(self, gold: NumberMatch) -> int | None:
        """The decimals that apply to one gold part (see the module docstring)."""
        if self.decimals:
            if len(self.decimals) == 1:
                return self.decimals[0]
            if gold.decimals in self.decimals:
                return gold.decimals
            finer = sorted(d for d in self.decimals if d >= gold.decimals)
            return finer[0] if finer else max(self.decimals)
        if self.integer:
            return 0
        return None


def _word_to_int(word: str) -> int:
    return int(word) if word.isdigit() else _WORD_DIGITS[word.lower()]


def parse_precision(guidelines: str | None) -> Precision:
    """Parse the precision the guidelines ask for.

    Examples (real DataClawBench guidelines): ``"相关系数保留4位小数，差值保留2位小数"`` ->
    decimals (4, 2); ``"numeric value (rounded to 4 decimal places)"`` -> (4,);
    ``"a numeric value (two decimal places, ...)"`` -> (2,); ``"numerical value (integer)"``
    -> integer. Returns an empty Precision when nothing is stated.
    """
    if not guidelines:
        return Precision()
    text = normalize_text(guidelines)
    found: list[tuple[int, int]] = []  # (position, decimals)
    for rx in _DECIMALS_RES:
        for m in rx.finditer(text):
            found.append((m.start(), _word_to_int(m.group(1))))
    for m in _PRECISE_TO_RE.finditer(text):
        found.append((m.start(), len(m.group(1)) - 2))
    decimals: list[int] = []
    for _, d in sorted(found):
        if d not in decimals:
            decimals.append(d)
    tolerance = None
    for rx in _TOLERANCE_RES:
        tol = rx.search(text)
        if tol:
            tolerance = float(tol.group(1))
            break
    return Precision(tuple(decimals), bool(_INTEGER_RE.search(text)), tolerance)


def numbers_equal(
    pred: NumberMatch,
    gold: NumberMatch,
    *,
    decimals: int | None = None,
    tolerance: float | None = None,
    rel_tol: float = 1e-6,
) -> bool:
    """Whether a predicted number equals a gold number.

    ``tolerance`` (absolute, in the gold's unit) wins over ``decimals`` (``|pred-gold| <=
    0.5*10**-decimals``), which wins over ``rel_tol`` (relative). Percent-marked values may
    also be read divided by 100 (module docstring).
    """
    pairs: list[tuple[float, float, float]] = [(pred.value, gold.value, 1.0)]
    if pred.percent and not gold.percent:
        pairs.append((pred.value / 100.0, gold.value, 1.0))
    if gold.percent and not pred.percent:
        pairs.append((pred.value, gold.value / 100.0, 0.01))
    for p, g, scale in pairs:
        slack = 1e-9 * max(1.0, abs(g))
        if tolerance is not None:
            ok = abs(p - g) <= tolerance * scale + slack
        elif decimals is not None:
            ok = abs(p - g) <= 0.5 * 10.0 ** (-decimals) * scale + slack
        else:
            ok = math.isclose(p, g, rel_tol=rel_tol, abs_tol=1e-12)
        if ok:
            return True
    return False


# --------------------------------------------------------------------------------------------
# Answer extraction
# --------------------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"```[A-Za-z0-9_-]*\s*\n?(.*?)```", re.S)
_MARKER_RE = re.compile(
    r"(?:final\s+answer|answer|最终答案|答案|结果|结论)\s*(?:is|为|是)?\s*[:：]\s*", re.I
)
_LIST_ITEM_RE = re.compile(r"^\s*(?:[-*•]\s+|\(?\d+[.)、](?!\d)\s*|\(\d+\)\s*|（\d+）\s*)")
_TRAILING_PUNCT = ".。!！;；,，"


def answer_keys(answer: Any) -> list[str]:
    """Sub-score keys for a gold answer: ``["match"]`` for a scalar, ``part_0..part_{L-1}``."""
    if isinstance(answer, list):
        return [f"part_{i}" for i in range(len(answer))]
    return ["match"]


LITERAL_EVAL_MAX_CHARS = 64 * 1024
"""Longest bracketed text (characters) parsed as a Python literal (:func:`ast.literal_eval`):
a longer one is read as JSON or as plain text (a model's 6 MB ``[1,1,...,1,]`` took ~18 s and
~3 GB to evaluate)."""


def _as_list(candidate: str) -> list[Any] | None:
    try:
        value = json.loads(candidate)
    except ValueError:
        value = None
        if len(candidate) <= LITERAL_EVAL_MAX_CHARS:
            try:
                value = ast.literal_eval(candidate)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = None
    if isinstance(value, list | tuple):
        return list(value)
    inner = candidate[1:-1].strip()
    if not inner or "[" in inner:
        return None
    return _split_parts(inner, None)


_SPLIT_THOUSANDS_SAFE = re.compile(r",(?!\d{3}(?:[^\d]|$))\s*|、|;|；")
_SPLIT_ALL = re.compile(r",\s*|、|;|；")


def _clean_part(part: str) -> str:
    part = _LIST_ITEM_RE.sub("", part.strip())
    return part.strip().strip("\"'`*").strip()


def _split_parts(text: str, want: int | None) -> list[str] | None:
    for rx in (_SPLIT_THOUSANDS_SAFE, _SPLIT_ALL):
        parts = [_clean_part(p) for p in rx.split(text)]
        parts = [p for p in parts if p]
        if want is None or len(parts) == want:
            return parts
    return None


def _candidate_sources(text: str) -> list[str]:
    """The text itself, preceded by the last fenced block's content when there is one."""
    fences = _FENCE_RE.findall(text)
    return ([fences[-1]] if fences else []) + [text]


def extract_parts(text: str, parts: int) -> list[Any] | None:
    """Extract a list answer of exactly ``parts`` elements from the final text, or None.

    Elements are kept as parsed (numbers stay numbers when the list was JSON/Python).
    """
    norm = normalize_text(text).strip()
    if not norm:
        return None
    for source in _candidate_sources(norm):
        for start, end in reversed(balanced_spans(source, "[", "]")):
            items = _as_list(source[start:end])
            if items is not None and len(items) == parts:
                return items
        marker = list(_MARKER_RE.finditer(source))
        segments = [source[marker[-1].end() :]] if marker else []
        segments += [source.strip()]
        for seg in segments:
            split = _split_parts(seg.strip().rstrip(_TRAILING_PUNCT), parts)
            if split is not None:
                return split
            lines = [_clean_part(ln) for ln in seg.splitlines()]
            lines = [ln for ln in lines if ln]
            if len(lines) == parts:
                return lines
    return None


def _scalar_segment(text: str) -> str:
    norm = normalize_text(text).strip()
    fences = _FENCE_RE.findall(norm)
    if fences:
        norm = fences[-1].strip()
    try:
        value = json.loads(norm)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
    except ValueError:
        pass
    markers = list(_MARKER_RE.finditer(norm))
    if markers:
        seg = norm[markers[-1].end() :].strip()
        return seg.splitlines()[0] if seg else seg
    return norm


def _strip_string(text: str) -> str:
    """Remove markdown emphasis, surrounding quotes or brackets and trailing punctuation."""
    s, prev = text.strip(), None
    while s != prev:
        prev = s
        s = s.strip("*`_").rstrip(_TRAILING_PUNCT).strip()
        if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
            s = s[1:-1].strip()
        if len(s) >= 2 and s[0] == "[" and s[-1] == "]":
            s = s[1:-1].strip()
    return s


def _pred_number(text: str) -> tuple[NumberMatch | None, bool]:
    nums = find_numbers(text)
    if not nums:
        return None, False
    return nums[-1], len(nums) > 1


def _compare_part(
    pred: Any, gold: Any, precision: Precision, tolerance: float | None
) -> tuple[int, dict[str, Any]]:
    info: dict[str, Any] = {"gold": gold, "predicted": pred}
    gold_num = parse_number(gold)
    if gold_num is not None:
        if isinstance(pred, int | float) and not isinstance(pred, bool):
            pred_num, ambiguous = parse_number(pred), False
        else:
            pred_num, ambiguous = _pred_number(normalize_text(str(pred)))
        decimals = precision.decimals_for(gold_num)
        tol = tolerance if tolerance is not None else precision.tolerance
        info.update(
            kind="number",
            decimals=decimals,
            tolerance=tol,
            ambiguous=ambiguous,
            predicted_value=pred_num.value if pred_num else None,
        )
        if pred_num is None:
            return 0, info
        ok = numbers_equal(pred_num, gold_num, decimals=decimals, tolerance=tol)
        return int(ok), info
    info["kind"] = "string"
    ok = fold(_strip_string(str(pred))) == fold(_strip_string(str(gold)))
    return int(ok), info


def compare_answer(
    final_text: str,
    answer: Any,
    guidelines: str | None = None,
    *,
    tolerance: float | None = None,
) -> Score:
    """Compare a final text with a gold answer; returns a Score (grader ``"exact"``).

    ``answer``: scalar (str/number) or list of L parts. ``guidelines``: the task's output
    guidelines (precision is read from them). ``tolerance`` overrides any stated tolerance
    (absolute, in the gold's unit). Never raises on odd text: unparseable = all parts 0.
    """
    precision = parse_precision(guidelines)
    keys = answer_keys(answer)
    details: dict[str, Any] = {
        "final_answer": final_text,
        "precision": {
            "decimals": list(precision.decimals),
            "integer": precision.integer,
            "tolerance": tolerance if tolerance is not None else precision.tolerance,
        },
    }
    if isinstance(answer, list):
        extracted = extract_parts(final_text, len(answer))
        details["extracted"] = extracted
        if extracted is None:
            details["unparsed"] = True
            subscores = dict.fromkeys(keys, 0)
            details["parts"] = []
        else:
            results = [
                _compare_part(p, g, precision, tolerance)
                for p, g in zip(extracted, answer, strict=True)
            ]
            subscores = {k: r[0] for k, r in zip(keys, results, strict=True)}
            details["parts"] = [r[1] for r in results]
    else:
        segment = _scalar_segment(final_text)
        gold_num = parse_number(answer)
        if gold_num is not None and len(find_numbers(segment)) > 1:
            lines = [ln for ln in segment.splitlines() if ln.strip()]
            if lines and find_numbers(lines[-1]):
                segment = lines[-1]
        details["extracted"] = segment
        value, info = _compare_part(segment, answer, precision, tolerance)
        subscores = {"match": value}
        details["parts"] = [info]
        if info.get("ambiguous"):
            details["ambiguous"] = True
    total = sum(subscores.values()) / len(keys) if keys else 0.0
    return Score(score=total, subscores=subscores, grader="exact", details=details)


def agent_run_error(transcript: Transcript) -> str | None:
    """The error message when an assistant message has ``stop_reason == "error"``, else None.

    DataClawBench (formats.md section 3): such a run is an error, not a 0; the judge is skipped.
    """
    for m in transcript.messages:
        if m.role == "assistant" and m.stop_reason == "error":
            return m.error_message or "assistant message ended with stopReason 'error'"
    return None


def run_error_score(message: str, grader: str) -> Score:
    """The Score for an agent run error: ``score`` None, ``error`` set, kind ``agent``."""
    return Score(
        score=None,
        grader=grader,
        error=f"agent run error: {message}",
        details={"error_kind": "agent", "skipped": True},
    )


def check_answer(task: Task, transcript: Transcript, *, tolerance: float | None = None) -> Score:
    """Grade a DataClawBench answer without a judge.

    Uses ``task.answer`` and ``task.guidelines`` (falls back to no stated precision) and the
    transcript's final text. Returns a Score (grader ``"exact"``; ``score`` in [0,1]) or, for an
    agent run error (stopReason "error") or a task without a gold answer, a Score with ``error``
    set and ``score`` None.
    """
    err = agent_run_error(transcript)
    if err is not None:
        return run_error_score(err, "exact")
    if task.answer is None:
        return Score(
            score=None,
            grader="exact",
            error=f"{task.source}: answer: the task has no gold answer to check against",
            details={"error_kind": "grading"},
        )
    return compare_answer(
        transcript.final_text(), task.answer, task.guidelines, tolerance=tolerance
    )


def combine(judge_score: Score, exact_score: Score) -> Score:
    """Combine judge and exact scores for ``--grader both``.

    The judge's result is the score (it is DataClawBench's protocol; a judge grading error stays
    an error). ``details["agreement"]`` = {``agree``: both totals equal (None when either is an
    error), ``parts``: per-key agreement, ``judge_total``, ``exact_total``}; ``details["exact"]``
    holds the exact Score's dump. Grader name ``"both"``.
    """
    jt, et = judge_score.score, exact_score.score
    agree: bool | None = None
    parts: dict[str, bool] = {}
    if jt is not None and et is not None and not judge_score.error and not exact_score.error:
        agree = abs(jt - et) < 1e-9
        for key, value in judge_score.subscores.items():
            if key in exact_score.subscores and isinstance(value, int | float):
                parts[key] = float(value) == float(exact_score.subscores[key])
    agreement = {
        "agree": agree,
        "parts": parts,
        "judge_total": jt,
        "exact_total": et,
    }
    details = dict(judge_score.details)
    details["agreement"] = agreement
    details["exact"] = exact_score.model_dump(mode="json")
    return judge_score.model_copy(update={"grader": "both", "details": details})
