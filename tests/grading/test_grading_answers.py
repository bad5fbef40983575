"""The deterministic answer checker on real DataClawBench gold answers and guidelines."""

from __future__ import annotations

import pytest

from clawrig.grading.answers import (
    LITERAL_EVAL_MAX_CHARS,
    check_answer,
    combine,
    compare_answer,
    extract_parts,
    find_numbers,
    parse_precision,
)
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.spec.trial import Score


def _final(text: str) -> Transcript:
    return Transcript(
        messages=[
            TranscriptMessage(role="user", text="q"),
            TranscriptMessage(role="assistant", text=text, stop_reason="stop"),
        ]
    )


def _check(dcb, key: str, text: str) -> Score:
    return check_answer(dcb(key), _final(text))


def test_precision_read_from_real_guidelines(dcb):
    # "相关系数保留4位小数，差值保留2位小数"
    assert parse_precision(dcb.gold("hypothesis_verification/hard001")["guidelines"]).decimals == (
        4,
        2,
    )
    # "a numeric value (two decimal places, in percentage points)"
    assert parse_precision(
        dcb.gold("hypothesis_verification/medium001")["guidelines"]
    ).decimals == (2,)
    # "numeric value (rounded to 4 decimal places)"
    assert parse_precision(
        dcb.gold("hypothesis_verification/medium003")["guidelines"]
    ).decimals == (4,)
    # "numerical value (integer)"
    p = parse_precision(dcb.gold("hypothesis_verification/medium009")["guidelines"])
    assert p.decimals == () and p.integer
    # "The answer must be "yes" or "no"": nothing numeric asked
    assert parse_precision(dcb.gold("comprehensive_decision/easy001")["guidelines"]).decimals == ()
    assert parse_precision("误差不超过0.01").tolerance == 0.01
    assert parse_precision("结果精确到0.001").decimals == (3,)


def test_hard001_list_answer_per_part_precision(dcb):
    key = "hypothesis_verification/hard001"  # gold [0.1142, -0.2132, 0.33]
    assert _check(dcb, key, '["0.1142", "-0.2132", "0.33"]').score == 1.0
    # unrounded values within half a unit of the asked decimal: 4 for the coefficients, 2 for
    # the difference (|0.11423-0.1142| = 3e-5 <= 5e-5; |0.3349-0.33| = 0.0049 <= 0.005)
    assert _check(dcb, key, "[0.11423, -0.21318, 0.3349]").score == 1.0
    s = _check(dcb, key, "[0.11, -0.2132, 0.34]")
    # 0.11 at 4 decimals: |0.11-0.1142| = 0.0042 > 5e-5 -> 0; 0.34: 0.01 > 0.005 -> 0
    assert s.subscores == {"part_0": 0, "part_1": 1, "part_2": 0}
    assert s.score == pytest.approx(1 / 3)
    # prose with a Chinese comma between parts, unicode minus
    s = _check(dcb, key, "有政策省份相关系数为0.1142，无政策省份为−0.2132，差值0.33。")
    assert s.score == 1.0
    # one value per line, numbered
    assert _check(dcb, key, "1. 0.1142\n2. -0.2132\n3. 0.33").score == 1.0
    # cannot be split into 3 parts: every part 0 (the rubric's rule), a score, not an error
    s = _check(dcb, key, "未查询到相关数据")
    assert s.score == 0.0 and s.error is None and s.details["unparsed"]


def test_chinese_strings_and_numbers_stored_as_strings(dcb):
    key = "risk_assessment/medium011"  # gold ["新疆维吾尔自治区", "4444.61"]
    assert _check(dcb, key, "新疆维吾尔自治区，4444.61").score == 1.0
    assert _check(dcb, key, '["新疆维吾尔自治区", 4444.61]').score == 1.0
    assert _check(dcb, key, "[新疆维吾尔自治区, 4444.606]").score == 1.0
    assert _check(dcb, key, "新疆, 4444.61").subscores == {"part_0": 0, "part_1": 1}
    key = "enterprise_industry_policy_analysis/easy067"  # gold "否"
    assert _check(dcb, key, "否").score == 1.0
    assert _check(dcb, key, "**否**。").score == 1.0
    assert _check(dcb, key, "是").score == 0.0


def test_english_strings_fold_case_and_whitespace(dcb):
    key = "comprehensive_decision/easy001"  # gold "Jiangsu Province"
    assert _check(dcb, key, "jiangsu   PROVINCE").score == 1.0
    assert _check(dcb, key, "Answer: Jiangsu Province.").score == 1.0
    assert _check(dcb, key, "Ｊｉａｎｇｓｕ Province").score == 1.0  # full-width letters, NFKC
    assert _check(dcb, key, "Jiangsu").score == 0.0  # no synonyms: the judge's job
    key = "risk_assessment/hard004"  # gold "No relevant data found"
    assert _check(dcb, key, '"No relevant data found"').score == 1.0


def test_percentages(dcb):
    key = "risk_assessment/hard001"  # gold 20.0, "percentage value (2 decimal places)"
    assert _check(dcb, key, "20.00%").score == 1.0
    assert _check(dcb, key, "20").score == 1.0
    assert _check(dcb, key, "20.004").score == 1.0  # within 0.005
    assert _check(dcb, key, "20.01").score == 0.0
    assert _check(dcb, key, "0.2").score == 0.0  # a bare fraction is another number
    key = "hypothesis_verification/hard005"  # gold ["29.29", "24.43", "4.87"] (strings), 2 dp
    assert _check(dcb, key, "29.29%, 24.43%, 4.87%").score == 1.0
    assert _check(dcb, key, "0.2929, 0.2443, 0.0487").score == 0.0
    # a gold written with a percent sign also matches its fraction
    assert compare_answer("0.125", "12.5%", "保留3位小数").score == 1.0
    assert compare_answer("12.5%", 0.125, None).score == 1.0


def test_scalar_numbers_integers_and_thousands(dcb):
    key = "hypothesis_verification/medium003"  # gold -0.0023, 4 decimals
    assert _check(dcb, key, "-0.0023").score == 1.0
    assert _check(dcb, key, "The Spearman coefficient is −0.0023.").score == 1.0
    assert _check(dcb, key, "-0.002").score == 0.0  # |diff| 3e-4 > 5e-5
    key = "risk_assessment/medium002"  # gold 3, "an integer"
    assert _check(dcb, key, "3").score == 1.0
    assert _check(dcb, key, "4").score == 0.0
    key = "risk_assessment/medium001"  # gold ["Shanghai", 97732260069.03], 2 dp
    assert _check(dcb, key, "Shanghai, 97,732,260,069.03").score == 1.0
    key = "hypothesis_verification/medium001"  # gold -0.73
    s = _check(dcb, key, "Policy group 10.8880%, non-policy 11.6136%.\nDifference: -0.73")
    assert s.score == 1.0
    # no stated precision: relative tolerance 1e-6
    assert compare_answer("245418.07", 245418.07, None).score == 1.0
    assert compare_answer("245418.5", 245418.07, None).score == 0.0


def test_number_finder():
    found = [(n.value, n.percent) for n in find_numbers("共80条，占比12.5％，r=−0.21，2020-2022年")]
    assert found == [(80.0, False), (12.5, True), (-0.21, False), (2020.0, False), (2022.0, False)]
    assert [n.value for n in find_numbers("CR3 = 1,009,833.5")] == [1009833.5]


def test_extract_list_forms():
    assert extract_parts('Result: ["江西省", 60.36]', 2) == ["江西省", 60.36]
    assert extract_parts("[浙江省, 1596.76, 1302.75]", 3) == ["浙江省", "1596.76", "1302.75"]
    assert extract_parts("```json\n[1, 2]\n```\nnote [9]", 2) == [1, 2]
    assert extract_parts("a、b、c", 3) == ["a", "b", "c"]
    assert extract_parts("only one", 2) is None


def test_a_python_literal_over_the_cap_is_read_as_plain_text():
    # a Python list (a trailing comma: not JSON) is evaluated as a literal up to the cap, its
    # numbers kept as numbers; past it, the text is split as plain text (strings): a model's
    # 6 MB "[1,1,...,1,]" took 17.7 s and 2.9 GB in ast.literal_eval (red-team 8, finding 6)
    small = "[1, 2, 'x',]"
    assert extract_parts(small, 3) == [1, 2, "x"]
    padded = "[1, 2, 'x'," + " " * LITERAL_EVAL_MAX_CHARS + "]"
    assert extract_parts(padded, 3) == ["1", "2", "x"]
    huge = "[" + "1," * 500_000 + "]"  # 1 MB: no list of 3 parts in it
    assert extract_parts(huge, 3) is None


def test_agent_run_error_is_an_error_not_a_zero(dcb):
    t = _final("Jiangsu Province")
    t.messages.append(
        TranscriptMessage(role="assistant", stop_reason="error", error_message="context overflow")
    )
    s = check_answer(dcb("comprehensive_decision/easy001"), t)
    assert s.score is None and s.error == "agent run error: context overflow"


def test_combine_reports_disagreement():
    judge = Score(score=1.0, subscores={"match": 1}, grader="judge")
    exact = compare_answer("Jiangsu", "Jiangsu Province", None)
    both = combine(judge, exact)
    assert both.score == 1.0  # the judge's score is the score
    assert both.details["agreement"]["agree"] is False
    assert both.details["agreement"]["parts"] == {"match": False}
    failed = combine(Score(error="judge unparseable", grader="judge"), exact)
    assert failed.score is None and failed.error == "judge unparseable"
    assert failed.details["agreement"]["agree"] is None
