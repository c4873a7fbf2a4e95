"""The offline gatekeeper-reject fixture: the gatekeeper alone rejects it with its expected rules."""

from devset.gold import fixture_executor_output, gold_tool_calls
from devset.metric import check_fixture
from tools.calls import ToolCall
from tools.functions import TOOLBOX
from tools.recorder import ToolInvocationRecorder


def test_offline_fixture_is_rejected_with_the_expected_rules(cases, store):
    case = cases["gatekeeper_reject"]
    recorder = ToolInvocationRecorder(store, "fixture", TOOLBOX)
    for call in gold_tool_calls(case):
        tool_call = ToolCall(**call)
        recorder.call(tool_call.tool_name, **tool_call.arguments())
    output = fixture_executor_output(case, [inv.id for inv in recorder.invocations])
    checked = check_fixture(case, output, recorder.invocations, "fixture", TOOLBOX)
    assert checked.ok and checked.severity == "reject"
    nothing = {"claims": [], "hypotheses": [], "missing_info": [], "recommended_actions": []}
    assert not check_fixture(case, nothing, recorder.invocations, "fixture", TOOLBOX).ok
