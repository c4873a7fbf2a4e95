"""The tool calls a stage asks for, run at most once each and within a budget per round."""

from __future__ import annotations

from program.stages.run import Run
from contracts import Finding

# The rule of a round that asked for more calls than it may make (a recorded name).
TOO_MANY = "executor.too_many_tool_calls"


def call_tools(run: Run, calls: list, limit: int) -> bool:
    """Run the calls that were not made before, the first `limit` of them; False when there was
    nothing new to run."""
    run.record.tool_requests.append([{"tool_name": c.tool_name, **c.arguments()} for c in calls])
    done = {(inv.tool_name, tuple(sorted(inv.input.items()))) for inv in run.recorder.invocations}
    fresh = []
    for call in calls:
        key = (call.tool_name, tuple(sorted(call.arguments().items())))
        service = call.arguments().get("service")
        if isinstance(service, str) and run.scope.exclusion.hits(service):
            # What the user excluded is never looked up, whoever asked for it.
            run.record.notes.append(Finding(rule="planner.excluded_call_skipped", message=(
                f"{call.tool_name}(service={service!r}) was not run: the user excluded {service}")))
            continue
        if key not in done:
            done.add(key)
            fresh.append(call)
    if len(fresh) > limit:
        run.errors.append(Finding(rule=TOO_MANY, message=f"asked for {len(fresh)} calls; ran the first {limit}"))
    for call in fresh[:limit]:
        run.recorder.call(call.tool_name, **call.arguments())
    return bool(fresh)
