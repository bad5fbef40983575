"""Process metrics (EE, GPR, TPE, TGPR) on transcripts built over real DataClawBench gold files.

Every expected number below is worked out by hand in the comments, from the gold file's
steps_num (N), its milestones (M, values) and the steps of the transcript (T). Definitions:
shared/reference/metrics.md; gamma = 0.9.
"""

from __future__ import annotations

import json

import pytest

from clawrig.grading.answers import check_answer
from clawrig.grading.judge import STRICT_INSTRUCTION
from clawrig.grading.process import (
    MilestoneResult,
    build_process_messages,
    grade_process,
    match_milestones,
    process_metrics,
    transcript_steps,
    value_matches,
)
from clawrig.spec.llm import ToolCall
from clawrig.spec.process import ProcessScore
from clawrig.spec.transcript import Transcript, TranscriptMessage
from clawrig.testing.scripted_server import reply

HARD001 = "hypothesis_verification/hard001"  # list answer, Chinese milestones, N=7, M=9
MEDIUM003 = "hypothesis_verification/medium003"  # nested dict milestone, N=6, M=6
MEDIUM002 = "risk_assessment/medium002"  # two list-of-strings milestones, N=6, M=4

# hard001, an incorrect run of T = 10 steps (9 tool/text steps + the final answer).
HARD001_STEPS = [
    (
        "先查看数据库文件。",
        ["company_profile.csv\ncompany_operation_status.csv\npolicy_release_status.csv"],
    ),  # 1
    (
        "筛选 industry 含“医药”的政策。",
        ["医药相关政策共80条，其中地方政策55条、部委/国务院政策25条"],
    ),  # 2
    (
        "匹配地方生物医药产业发展促进政策。",
        ["标题含生物医药的地方政策：8条，政策id为：92、141、381、430、431、432、433、436"],
    ),  # 3
    ("接下来统计这些政策涉及的省份。", []),  # 4: text only
    ("", ["涉及省份数：7个（上海市、江苏省、云南省、广东省、安徽省、浙江省、天津市）"]),  # 5
    ("", ["医药制造业企业449家，有效企业417家"]),  # 6
    ("", ["有政策省份企业数: 200\n无政策省份企业数: 217"]),  # 7
    ("", ["Traceback (most recent call last):\nKeyError: '研发投入占比'"]),  # 8
    (
        "",
        ["有政策省份 spearman r=0.1142 (p=0.1075)\n无政策省份 spearman r=-0.1987 (p=0.0031)"],
    ),  # 9
]
HARD001_FINAL = '["0.1142", "-0.1987", "0.31"]'  # 10


def test_gold_files_are_what_the_hand_computations_assume(dcb):
    gold = dcb.gold(HARD001)
    assert gold["steps_num"] == 7 and len(gold["milestone"]) == 9
    assert list(gold["milestone"].values()) == [80, 8, 7, 417, 200, 217, 0.1142, -0.2132, 0.33]
    gold = dcb.gold(MEDIUM003)
    assert gold["steps_num"] == 6 and len(gold["milestone"]) == 6
    assert isinstance(gold["milestone"]["Sample province data"], dict)
    gold = dcb.gold(MEDIUM002)
    assert gold["steps_num"] == 6 and len(gold["milestone"]) == 4
    # the reader carries them into the Task unchanged
    task = dcb(HARD001)
    assert task.steps_num == 7 and list(task.milestones) == list(dcb.gold(HARD001)["milestone"])


def test_steps_group_tool_results_with_the_call_that_made_them():
    t = Transcript(
        messages=[
            TranscriptMessage(role="user", text="q"),
            TranscriptMessage(
                role="assistant",
                text="two calls, one step",
                tool_calls=[ToolCall(id="a", name="exec"), ToolCall(id="b", name="read")],
            ),
            TranscriptMessage(role="toolResult", tool_call_id="b", tool_name="read", text="B"),
            TranscriptMessage(role="toolResult", tool_call_id="a", tool_name="exec", text="A"),
            TranscriptMessage(role="assistant", tool_calls=[ToolCall(id="c", name="exec")]),
            TranscriptMessage(role="toolResult", tool_call_id="c", tool_name="exec", text="C"),
            TranscriptMessage(role="toolResult", tool_call_id="zz", tool_name="exec", text="Z"),
            TranscriptMessage(role="assistant", text="done"),
        ]
    )
    steps = transcript_steps(t)
    assert [s.index for s in steps] == [1, 2, 3]
    assert steps[0].tool_outputs == [("read", "B"), ("exec", "A")]
    # an unknown call id attaches to the latest step before it
    assert steps[1].tool_outputs == [("exec", "C"), ("exec", "Z")]
    assert steps[2].tool_outputs == [] and steps[2].text == "done"


def test_hard001_incorrect_run_deterministic_matcher(dcb, make_transcript):
    task = dcb(HARD001)
    transcript = make_transcript(HARD001_STEPS, final=HARD001_FINAL)
    # answer: only part_0 (0.1142) matches gold [0.1142, -0.2132, 0.33] -> 1/3, incorrect
    score = check_answer(task, transcript)
    assert score.subscores == {"part_0": 1, "part_1": 0, "part_2": 0}
    assert score.score == pytest.approx(1 / 3)

    results = match_milestones(task, transcript)
    # first step containing each value:
    # 80 -> step 2; 8 -> step 3 (step 2 has 80/55/25 only); 7 -> step 5; 417 -> step 6;
    # 200, 217 -> step 7; 0.1142 -> step 9; -0.2132 (agent got -0.1987) and 0.33 (0.31): never
    assert [(r.achieved, r.step) for r in results] == [
        (True, 2),
        (True, 3),
        (True, 5),
        (True, 6),
        (True, 7),
        (True, 7),
        (True, 9),
        (False, None),
        (False, None),
    ]
    ps = process_metrics(task, transcript, score.score, results)
    # N = 7, M = 9, achieved A = 7.
    # weights 0.9^max(t-7, 0): steps 2,3,5,6,7,7 -> 1 each (6.0); step 9 -> 0.9^2 = 0.81
    # GPR = 7/9; TPE = (6 + 0.81)/7 = 6.81/7 = 0.972857142857...; TGPR = 6.81/9 = 0.756666...
    assert set(ps) == {"gpr", "tgpr"}
    assert ps["gpr"]["gpr"] == pytest.approx(7 / 9)
    assert ps["gpr"]["milestones_total"] == 9
    assert ps["gpr"]["milestones_achieved"] == 7
    assert ps["gpr"]["break_point"] == 8
    assert "有政策省份斯皮尔曼系数" not in ps["gpr"]["chain_summary"]
    assert "无政策省份斯皮尔曼系数" in ps["gpr"]["chain_summary"]
    assert ps["tgpr"]["tpe"] == pytest.approx(0.9728571428571429)
    assert ps["tgpr"]["tgpr"] == pytest.approx(0.7566666666666667)
    assert ps["tgpr"]["gpr"] == pytest.approx(7 / 9)
    assert ps["tgpr"]["gamma"] == 0.9 and ps["tgpr"]["s_gold"] == 7
    assert [d["weight"] for d in ps["tgpr"]["details"]] == pytest.approx(
        [1, 1, 1, 1, 1, 1, 0.81, 0, 0]
    )
    assert ps["gpr"]["details"][0]["milestone"] == "医药相关政策总数（条）"
    # the whole dict is JSON (process_score.json) with Chinese kept readable
    assert "医药相关政策总数" in json.dumps(ps, ensure_ascii=False)
    # its typed model (what result.json holds and readers use) keeps the file's shape exactly
    typed = ProcessScore.model_validate(ps)
    assert typed.model_dump(mode="json") == json.loads(json.dumps(ps))
    assert typed.metrics() == pytest.approx(
        {"ee": None, "gpr": 7 / 9, "tpe": 6.81 / 7, "tgpr": 6.81 / 9}
    )


def test_hard001_correct_run_gives_execution_efficiency(dcb, make_transcript):
    task = dcb(HARD001)
    transcript = make_transcript(
        [
            ("", ["医药相关政策共80条"]),
            ("", ["地方生物医药政策8条，省份7个"]),
            ("", ["有效企业417家：有政策200家，无政策217家"]),
            ("", ["r1=0.1142 r2=-0.2132 diff=0.3274"]),
        ],
        final='["0.1142", "-0.2132", "0.33"]',
    )
    score = check_answer(task, transcript)
    assert score.score == 1.0
    # correct run: EE = N / T = 7 / 5 = 1.4 (four tool steps + the final answer)
    ps = process_metrics(task, transcript, score.score, None)
    assert ps == {"efficiency": {"s_agent": 5, "s_gold": 7, "efficiency": 1.4}}
    typed = ProcessScore.model_validate(ps)
    assert typed.model_dump(mode="json") == ps
    assert typed.metrics() == {"ee": 1.4, "gpr": None, "tpe": None, "tgpr": None}


MEDIUM003_STEPS = [
    ("Counting automotive policies.", ["automotive-related policies: 69 (national excluded: 53)"]),
    ("", ["provinces with automotive policies: 20"]),  # 2
    ("", ["valid provinces (revenue > 0): 14"]),  # 3
    (
        "Partial table:",
        ["Guangdong Province  10  2.9496%\nShanghai  7  0.582%\nHunan Province  5  7.6412%"],
    ),  # 4: three of the five sample provinces only
    ("", ["spearman rho = -0.0152, p = 0.9589"]),  # 5
    ("The margins look off; recomputing.", []),  # 6
    ("", ["KeyError: 'operating_profit'"]),  # 7
    (
        "",
        [
            "Guangdong Province: policies=10, margin=2.9496%\n"
            "Shanghai: policies=7, margin=0.5820%\n"
            "Hunan Province: policies=5, margin=7.6412%\n"
            "Sichuan Province: policies=4, margin=8.1755%\n"
            "Shandong Province: policies=3, margin=3.4020%"
        ],
    ),  # 8: every leaf of the nested milestone
]


def test_medium003_nested_milestone_needs_every_leaf_in_one_step(dcb, make_transcript):
    task = dcb(MEDIUM003)
    transcript = make_transcript(MEDIUM003_STEPS, final="-0.0152")  # T = 9
    score = check_answer(task, transcript)
    assert score.score == 0.0  # -0.0152 vs gold -0.0023 at 4 decimals
    results = match_milestones(task, transcript)
    # 69 -> 1; 20 -> 2; 14 -> 3; nested sample data: step 4 lacks 4, 8.1755, 3, 3.402 -> step 8;
    # -0.0023 and 0.99388 never appear (agent: -0.0152, p 0.9589 is 3.5% off)
    assert [(r.achieved, r.step) for r in results] == [
        (True, 1),
        (True, 2),
        (True, 3),
        (True, 8),
        (False, None),
        (False, None),
    ]
    assert results[3].evidence == "all 10 values found in step 8"
    ps = process_metrics(task, transcript, score.score, results)
    # N = 6, M = 6, A = 4; weights 1, 1, 1, 0.9^(8-6) = 0.81 -> sum 3.81
    # GPR = 4/6; TPE = 3.81/4 = 0.9525; TGPR = 3.81/6 = 0.635
    assert ps["gpr"]["gpr"] == pytest.approx(4 / 6)
    assert ps["gpr"]["break_point"] == 5
    assert ps["tgpr"]["tpe"] == pytest.approx(0.9525)
    assert ps["tgpr"]["tgpr"] == pytest.approx(0.635)
    assert ps["tgpr"]["details"][3]["delay"] == 2


MEDIUM002_STEPS = [
    ("", ["provinces with >= 10 enterprises: 11"]),  # 1
    ("", ["R&D CR3 > 60%: Hong Kong SAR, Jilin Province, Sichuan Province"]),  # 2: no Hubei
    (
        "",
        [
            "patent CR3 > 60%:\n  hong kong sar\n  SHANGHAI MUNICIPALITY\n  Hubei   Province\n"
            "  Sichuan Province"
        ],
    ),  # 3: the four patent provinces, other case and spacing
]


def test_medium002_list_milestones_and_the_downstream_rule(dcb, make_transcript):
    task = dcb(MEDIUM002)
    transcript = make_transcript(MEDIUM002_STEPS, final="2")  # T = 4, gold answer 3
    score = check_answer(task, transcript)
    assert score.score == 0.0
    # 11 -> step 1. R&D list (HK, Jilin, Sichuan, Hubei): step 2 lacks Hubei, step 3 lacks
    # Jilin -> never in one step. Patent list -> step 3 (folding case and whitespace).
    # Count 3: "CR3" is a name, not the number 3; the answer says 2 -> never.
    plain = match_milestones(task, transcript)
    assert [(r.achieved, r.step) for r in plain] == [
        (True, 1),
        (False, None),
        (True, 3),
        (False, None),
    ]
    ps = process_metrics(task, transcript, score.score, plain)
    # N = 6, M = 4, A = 2, both steps <= N -> weights 1: GPR 0.5, TPE 1.0, TGPR 0.5
    assert (ps["gpr"]["gpr"], ps["tgpr"]["tpe"], ps["tgpr"]["tgpr"]) == (0.5, 1.0, 0.5)
    assert ps["gpr"]["break_point"] == 2

    # "a correct downstream milestone implies its upstream ones": milestone 2 becomes achieved
    # at step 3 (milestone 3's step); milestone 4 has nothing after it and stays unachieved.
    inferred = match_milestones(task, transcript, infer_upstream=True)
    assert [(r.achieved, r.step, r.source) for r in inferred] == [
        (True, 1, "match"),
        (True, 3, "inferred"),
        (True, 3, "match"),
        (False, None, "match"),
    ]
    ps = process_metrics(task, transcript, score.score, inferred)
    # A = 3: GPR 0.75, TPE 3/3 = 1.0, TGPR 3/4 = 0.75
    assert (ps["gpr"]["gpr"], ps["tgpr"]["tpe"], ps["tgpr"]["tgpr"]) == (0.75, 1.0, 0.75)
    assert ps["gpr"]["break_point"] == 4


def test_medium002_correct_run_ee(dcb, make_transcript):
    task = dcb(MEDIUM002)
    steps = [("", [f"step {c}"]) for c in "abcdefg"]  # 7 tool steps
    transcript = make_transcript(steps, final="3")  # T = 8
    score = check_answer(task, transcript)
    assert score.score == 1.0
    # EE = N / T = 6 / 8 = 0.75
    assert process_metrics(task, transcript, 1.0)["efficiency"] == {
        "s_agent": 8,
        "s_gold": 6,
        "efficiency": 0.75,
    }


def test_number_matching_in_real_milestone_contexts(dcb):
    m007 = dcb.gold("hypothesis_verification/medium007")["milestone"]
    # thousands separators and Chinese around the digits
    assert value_matches(
        m007["Total revenue of private enterprises"], "民营企业总营收1,009,833,229,861.02元"
    )
    assert value_matches(m007["Total employees of private enterprises"], "员工合计471,176人")
    # within 1%: 2143218.73 vs 2,150,000 (0.32% off) yes; vs 2,200,000 (2.6% off) no
    assert value_matches(m007["Per capita revenue of private enterprises"], "约2,150,000元/人")
    assert not value_matches(m007["Per capita revenue of private enterprises"], "约2,200,000元/人")
    r001 = dcb.gold("risk_assessment/hard001")["milestone"]
    # percent sign: 20.0 (%) matches "20.00%" and "20%"; a bare 0.2 is another number
    assert value_matches(r001["Proportion (%)"], "占比为20.00%")
    assert value_matches(r001["Proportion (%)"], "proportion: 20%")
    assert not value_matches(r001["Proportion (%)"], "proportion 0.2")
    # near zero: the absolute tolerance is 1e-6 (1% of 0.0023 is 2.3e-5)
    assert value_matches(-0.0023, "rho=-0.00231")
    assert not value_matches(-0.0023, "rho=-0.0024")
    assert value_matches(0, "difference 0.0000004") and not value_matches(0, "0.01")
    # negative sign after Chinese text; a range dash is not a sign
    assert value_matches(-0.2132, "系数为−0.2132")
    assert not value_matches(-2022, "2020-2022")
    # strings: folded; ASCII words whole, Chinese as substrings (real string milestones)
    e001 = dcb.gold("enterprise_industry_analysis/easy001")["milestone"]
    verdict = e001["Comparison result (whether the company is higher than the industry median)"]
    assert verdict == "Yes"
    assert value_matches(verdict, "higher than median? YES")
    assert not value_matches(verdict, "as computed yesterday")
    assert value_matches(
        dcb.gold("enterprise_industry_policy_analysis/easy067")["milestone"][
            "众白昌锦商贸公司所在省份"
        ],
        "该公司注册地位于上海市浦东新区",
    )


def test_an_achieved_milestone_without_a_step_is_a_grading_error(dcb, make_transcript):
    task = dcb(MEDIUM002)
    transcript = make_transcript(MEDIUM002_STEPS, final="2")
    results = [
        MilestoneResult(j, name, value, achieved=j == 1, step=None)
        for j, (name, value) in enumerate(task.milestones.items(), start=1)
    ]
    ps = process_metrics(task, transcript, 0.0, results)
    assert ps["error_kind"] == "grading"
    assert "milestone 1" in ps["error"] and "without a step" in ps["error"]


async def test_grade_process_skips_ungraded_runs_and_routes_by_score(dcb, make_transcript):
    task = dcb(MEDIUM003)
    transcript = make_transcript(MEDIUM003_STEPS, final="-0.0152")
    assert "skipped" in await grade_process(task, transcript, None)
    ps = await grade_process(task, transcript, 0.0)
    assert ps["tgpr"]["tgpr"] == pytest.approx(0.635)
    ps = await grade_process(task, transcript, 1.0)
    assert ps == {"efficiency": {"s_agent": 9, "s_gold": 6, "efficiency": 6 / 9}}


# ---------------------------------------------------------------------------------------------
# The process-judge protocol against the scripted OpenAI-compatible server
# ---------------------------------------------------------------------------------------------


def _judge_reply(pairs: list[tuple[bool, int | None]]) -> str:
    items = [
        {"index": j, "achieved": a, "step": s, "evidence": "seen"}
        for j, (a, s) in enumerate(pairs, start=1)
    ]
    return json.dumps({"milestones": items, "notes": "ok"})


async def test_process_judge_malformed_then_valid_with_downstream_rule(
    dcb, make_transcript, scripted_server, tmp_path
):
    task = dcb(HARD001)
    transcript = make_transcript(HARD001_STEPS, final=HARD001_FINAL)
    bad = _judge_reply(
        [(True, 2), (True, 3), (True, 5), (True, None), (True, 7)] + [(False, None)] * 4
    )
    good = (
        "Here is my assessment.\n```json\n"
        + _judge_reply(
            [(True, 2), (True, 3), (True, 5), (True, 6), (True, 7), (False, None), (True, 9)]
            + [(False, None)] * 2
        )
        + "\n```"
    )
    srv = scripted_server([reply(bad), reply(good)])
    log = tmp_path / "judge_process_chat.jsonl"
    ps = await grade_process(
        task, transcript, 1 / 3, method="judge", model=srv.chat_model(), log_path=log
    )
    # attempt 1: milestone 4 achieved without a step -> malformed; attempt 2 is stricter
    assert len(srv.requests) == 2
    first, second = (r["messages"][-1]["content"] for r in srv.requests)
    assert STRICT_INSTRUCTION not in first and STRICT_INSTRUCTION in second
    assert "only one JSON object of exactly this shape" in second
    assert all(r["temperature"] == 0 for r in srv.requests)
    # judge: 1@2, 2@3, 3@5, 4@6, 5@7, 6 no, 7@9, 8 no, 9 no.
    # downstream rule: 6 is upstream of 7 (achieved at 9) -> 6 achieved at step 9.
    # N = 7: weights 1,1,1,1,1 (steps <= 7), 0.81 (6@9), 0.81 (7@9) -> sum 6.62, A = 7
    # GPR = 7/9; TPE = 6.62/7 = 0.945714...; TGPR = 6.62/9 = 0.735555...
    assert ps["gpr"]["gpr"] == pytest.approx(7 / 9)
    assert ps["tgpr"]["tpe"] == pytest.approx(6.62 / 7)
    assert ps["tgpr"]["tgpr"] == pytest.approx(6.62 / 9)
    assert ps["gpr"]["details"][5]["source"] == "inferred"
    assert ps["gpr"]["details"][5]["step"] == 9
    lines = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()]
    assert [(x["kind"], x["attempt"], x["valid"]) for x in lines] == [
        ("process", 1, False),
        ("process", 2, True),
    ]
    assert "without a step" in lines[0]["error"]


async def test_process_judge_unparseable_after_five_attempts_is_a_grading_error(
    dcb, make_transcript, scripted_server, tmp_path
):
    task = dcb(MEDIUM003)
    transcript = make_transcript(MEDIUM003_STEPS, final="-0.0152")
    srv = scripted_server([reply("I cannot tell.")] * 5)
    ps = await grade_process(
        task, transcript, 0.0, method="judge", model=srv.chat_model(), log_path=None
    )
    assert len(srv.requests) == 5
    assert ps["error_kind"] == "grading" and "5 attempts" in ps["error"]


def test_process_prompt_shows_gold_steps_milestones_and_seeded_snippets(dcb, make_transcript):
    task = dcb(HARD001)
    labels = "ABCDEFGH"
    # 8 occurrences of 417 (a milestone value), 1000 characters apart: more than 5 -> 5 sampled
    long_output = "".join(f"ROW-{c}: 417 rows\n" + "~" * 1000 + "\n" for c in labels)
    transcript = make_transcript(
        [("统计企业。", [long_output, "short output: 有效企业 417 家", "no numbers here"])],
        final="[1, 2, 3]",
    )
    steps = transcript_steps(transcript)
    prompt = build_process_messages(task, steps, seed=0)[-1]["content"]
    # gold steps, milestones (with values), and the step's assistant text
    assert "1. 从policy_release_status.csv筛选industry字段包含" in prompt
    assert "4. 医药制造业有效企业数（家）: 417" in prompt
    assert "## Gold solution steps (N = 7)" in prompt and "(M = 9)" in prompt
    assert "### Step 1\nAssistant text: 统计企业。" in prompt
    # long output: +-300 character windows, 5 of the 8 occurrences
    shown = [c for c in labels if f"ROW-{c}: 417" in prompt]
    assert len(shown) == 5
    assert "~" * 1000 not in prompt
    # short output: whole; output without a milestone number: left out, and said so
    assert "short output: 有效企业 417 家" in prompt
    assert "no numbers here" not in prompt
    assert "(1 tool output(s) without a milestone number not shown)" in prompt
    # seeded: the same seed gives the same prompt; the seeds 0..9 do not all pick the same 5
    assert build_process_messages(task, steps, seed=0)[-1]["content"] == prompt
    picks = {
        tuple(
            c
            for c in labels
            if f"ROW-{c}: 417" in build_process_messages(task, steps, seed=s)[-1]["content"]
        )
        for s in range(10)
    }
    assert len(picks) > 1
