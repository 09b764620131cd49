"""What a result keeps of the agent's transcript (``transcript.transcript_of``: the report's
steps) and the calls each trace check names (``GraderResult.calls``), which the report links
to: the same positions the checks count, bounded, with what was cut said."""

from __future__ import annotations

from gradebox.graders.trace import TraceAssertion
from gradebox.graders.trajectory import SkillTrigger, ToolTrajectory
from gradebox.graders.transcript import MAX_STEPS, TEXT_CAP, TRANSCRIPT_CAP, transcript_of
from gradebox.protocol.models import Message, Payload


def _m(role: str, content: object = "", calls: list | None = None, **extra) -> Message:
    return Message.model_validate(
        {"role": role, "content": content, **({"tool_calls": calls} if calls else {}), **extra}
    )


AGENT = [
    _m("user", "weather?"),
    _m("assistant", "looking", [
        {"tool": "search", "input": {"q": "w"}, "output": ["sunny"], "durationMs": 40},
        {"nothing": "not a call: left out, as the checks leave it out"},
        {"function": {"name": "fetch", "arguments": '{"url": "u"}'}},
    ], durationMs=800, tokenUsage={"input": 400, "output": 30}),
    _m("assistant", "", [{"name": "Read", "args": {"path": "skills/pdf/SKILL.md"},
                          "status": "error"}]),
    _m("assistant", "sunny"),
]  # fmt: skip


def test_the_transcript_keeps_each_message_and_call_at_the_checks_positions():
    kept = transcript_of(AGENT, "sunny")
    assert kept is not None and kept.messages == 4 and kept.tool_calls == 3 and kept.cut == []
    assert [s.role for s in kept.steps] == ["user", "assistant", "assistant", "assistant"]
    calls = [c for s in kept.steps for c in s.tool_calls]
    assert [(c.position, c.name) for c in calls] == [(0, "search"), (1, "fetch"), (2, "Read")]
    assert calls[0].args == {"q": "w"} and calls[0].output == ["sunny"]
    assert calls[0].duration_ms == 40 and calls[1].args == {"url": "u"} and calls[2].error
    second = kept.steps[1]
    assert second.duration_ms == 800 and second.token_usage.input == 400


def test_an_answer_alone_is_no_transcript():
    assert transcript_of([_m("assistant", "42")], "42") is None
    assert transcript_of([], "42") is None
    assert transcript_of([_m("assistant", "42", [{"tool": "t"}])], "42") is not None
    assert transcript_of([_m("user", "q"), _m("assistant", "42")], "42") is not None


def test_texts_messages_and_the_whole_are_bounded_and_the_cut_said():
    big = "x" * (TEXT_CAP + 5)
    kept = transcript_of([_m("assistant", big, [{"tool": "t", "input": {"a": big}}])], "")
    step = kept.steps[0]
    assert step.cut and len(step.text) == TEXT_CAP
    call = step.tool_calls[0]
    assert call.cut and isinstance(call.args, str) and len(call.args) == TEXT_CAP
    assert kept.cut == [f"2 text(s) cut: at most {TEXT_CAP:,} characters each, "
                        f"{TRANSCRIPT_CAP:,} in all"]  # fmt: skip
    many = [_m("assistant", str(i), [{"tool": "t"}]) for i in range(MAX_STEPS + 10)]
    kept = transcript_of(many, "")
    assert len(kept.steps) == MAX_STEPS and kept.messages == MAX_STEPS + 10
    assert kept.tool_calls == MAX_STEPS + 10
    assert kept.cut == [f"kept the first {MAX_STEPS} of {MAX_STEPS + 10} messages"]
    whole = [_m("assistant", "y" * TEXT_CAP) for _ in range(TRANSCRIPT_CAP // TEXT_CAP + 3)]
    kept = transcript_of(whole, "")
    assert sum(len(s.text or "") for s in kept.steps) == TRANSCRIPT_CAP
    assert kept.steps[-1].cut and kept.steps[-1].text == ""


def _payload() -> Payload:
    return Payload(output="sunny", messages=AGENT)


def test_each_trace_check_names_the_calls_its_verdict_reads():
    def named(check) -> list[int]:
        return check.evaluate(_payload()).calls

    in_order = ToolTrajectory(mode="in_order", expected=[{"tool": "search"}, {"tool": "fetch"}])
    assert named(in_order) == [0, 1]
    exact = ToolTrajectory(mode="exact", expected=[{"tool": "search"}, {"tool": "Read"}])
    assert named(exact) == [0, 1]  # position 1 is fetch, not Read: named, as it is compared
    assert named(ToolTrajectory(mode="any_order", minimums={"fetch": 1})) == [1]
    assert named(ToolTrajectory(mode="superset", expected=[{"tool": "Read"}])) == [2]
    assert named(ToolTrajectory(mode="subset", expected=[{"tool": "search"}])) == [0, 1, 2]
    assert named(SkillTrigger(skill="pdf")) == [2]
    assert named(SkillTrigger(skill="csv")) == []
    assert named(TraceAssertion(type="trajectory:tool-used", value="fetch")) == [1]
    used = TraceAssertion(type="trajectory:tool-used", value={"pattern": "^(search|Read)$"})
    assert named(used) == [0, 2]
    args = TraceAssertion(type="trajectory:tool-args-match",
                          value={"name": "search", "args": {"q": "w"}})  # fmt: skip
    assert named(args) == [0]
    missed = TraceAssertion(type="trajectory:tool-args-match",
                            value={"name": "search", "args": {"q": "x"}})  # fmt: skip
    assert missed.evaluate(_payload()).passed is False and named(missed) == [0]
    seq = TraceAssertion(type="trajectory:tool-sequence", value=["search", "fetch"])
    assert named(seq) == [0, 1]
    assert named(TraceAssertion(type="execution-metrics", max_tool_calls=5)) == []


def test_skill_used_names_the_skill_calls_it_saw_bounded():
    def check(kind: str, value: object, payload: Payload | None = None):
        return TraceAssertion(type=kind, value=value).evaluate(payload or _payload())

    skills = [
        _m("assistant", "", [{"tool": "search"}, {"tool": "Skill", "input": {"skill": "pdf"}}]),
        _m("assistant", "", [{"tool": "Read", "input": {"file_path": "/w/skills/csv/SKILL.md"}}]),
    ]
    payload = Payload(output="", messages=skills)
    used = check("skill-used", "pdf", payload)
    assert used.passed and used.calls == [1]
    assert used.evidence.endswith("actual: pdf, csv (heuristic, /w/skills/csv/SKILL.md)")
    missing = check("skill-used", ["pdf", "docx"], payload)
    assert not missing.passed and missing.calls == [1] and "actual: pdf, csv" in missing.evidence
    assert check("skill-used", {"pattern": "*", "min": 3}, payload).calls == [1, 2]
    clean = check("not-skill-used", "docx", payload)  # a pass says what it saw too
    assert clean.passed and clean.calls == [] and "actual: pdf, csv" in clean.evidence
    forbidden = check("not-skill-used", "csv", payload)
    assert not forbidden.passed and forbidden.calls == [2]
    # An agent's names are its own: each cut, and past the first few only counted.
    flood = [{"tool": "Skill", "input": {"skill": f"s{i}-" + "x" * 5000}} for i in range(300)]
    flooded = check("skill-used", "pdf", Payload(output="", messages=[_m("assistant", "", flood)]))
    assert not flooded.passed and len(flooded.evidence) < 3000
    assert flooded.evidence.endswith(" and 290 more") and "s9-xxx" in flooded.evidence
    assert "s10-" not in flooded.evidence


def test_tool_used_and_tool_sequence_list_the_tools_called_bounded():
    def check(kind: str, value: object, payload: Payload):
        return TraceAssertion(type=kind, value=value).evaluate(payload)

    # An agent's tool names and their count are its own: each cut, past the first few counted.
    flood = [{"tool": f"t{i}-" + "x" * 5000} for i in range(300)]
    payload = Payload(output="", messages=[_m("assistant", "", flood)])
    for kind, value in [
        ("trajectory:tool-used", "search"),  # a fail
        ("trajectory:tool-used", {"pattern": "^t", "min": 1}),  # a pass
        ("trajectory:tool-sequence", ["search"]),
        ("trajectory:tool-sequence", {"steps": ["search"], "mode": "exact"}),
    ]:
        evidence = check(kind, value, payload).evidence
        assert len(evidence) < 3000, (kind, value, len(evidence))
        assert " and 290 more" in evidence and "t9-xxx" in evidence and "t10-" not in evidence
    few = Payload(output="", messages=[_m("assistant", "", [{"tool": "a"}, {"tool": "b"}])])
    assert check("trajectory:tool-used", "a", few).evidence.endswith("(trace: a, b)")
    assert check("trajectory:tool-sequence", ["a", "b"], few).evidence.endswith("saw a, b")


def test_skill_trigger_cuts_the_names_it_shows():
    long = "x" * 50_000
    for call in [
        {"tool": "Skill", "input": {"skill": "pdf" + long}},
        {"tool": "Read", "input": {"file_path": f"/w/skills/pdf/{long}"}},
        {"tool": "t" + long, "output": "see skills/pdf/SKILL.md"},
    ]:
        payload = Payload(output="", messages=[_m("assistant", "", [call])])
        found = SkillTrigger(skill="pdf").evaluate(payload)
        assert found.passed and len(found.evidence) < 1000, len(found.evidence)


def test_tool_args_match_shows_the_arguments_it_saw_bounded():
    # The arguments are the agent's: each shown cut, as a tool's name is, past the first few
    # counted. Five calls of 100 kB arguments made a 500 kB evidence.
    calls = [{"tool": "search", "input": {"q": f"{i}-" + "x" * 100_000}} for i in range(30)]
    payload = Payload(output="", messages=[_m("assistant", "", calls)])
    check = TraceAssertion(type="trajectory:tool-args-match",
                           value={"name": "search", "args": {"q": "y"}})  # fmt: skip
    found = check.evaluate(payload)
    assert not found.passed and len(found.evidence) < 3000, len(found.evidence)
    assert "{'q': '9-xxx" in found.evidence and "and 20 more" in found.evidence
    few = Payload(output="", messages=[_m("assistant", "", [calls[0] | {"input": {"q": "z"}}])])
    assert check.evaluate(few).evidence.endswith("saw {'q': 'z'}")


def test_tool_trajectory_cuts_the_names_it_shows():
    # The agent names its tools: one 2,000-character name filled the evidence (cut at 2,000)
    # and hid every later position's note, the one that says why the check failed.
    calls = [{"tool": "t" + "x" * 50_000}, {"tool": "b"}]
    payload = Payload(output="", messages=[_m("assistant", "", calls)])
    for mode, tail in [("exact", "position 1: expected a, got b"),
                       ("subset", "position 1: b is not allowed")]:  # fmt: skip
        found = ToolTrajectory(mode=mode, expected=[{"tool": "a"}, {"tool": "a"}]).evaluate(payload)
        assert not found.passed and found.evidence.endswith(tail), (mode, found.evidence[-200:])
