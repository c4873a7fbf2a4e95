import threading

from tools.functions import QUERY_LOGS, TOOLBOX
from tools.recorder import (
    COPIED_OBSERVATION,
    PREVIEW_CHARS,
    ObservedRef,
    ToolInvocationRecorder,
    canonical_label,
    citation_label,
    extract_retrieval_details,
    observed_refs,
    render_observations,
)


def test_metrics_refs_carry_the_whole_alert(recorder):
    inv = recorder.call("query_metrics", service="order-service")
    assert inv.id > 0 and inv.session_id == "sess-test" and inv.success
    (ref,) = inv.retrieval_details.evidence_refs
    assert ref.raw_path == "$.alerts[0]"
    for fact in ("HighMemoryUsage firing", "service=order-service", "current=91%", "duration=15m", "3.8GB/4GB",
                 "Full GC 15 times", "850ms", "86.2 -> 87.4 -> 88.6 -> 89.8 -> 91.0"):
        assert fact in ref.text


def test_log_refs_use_the_quoted_line_format(recorder):
    inv = recorder.call("query_logs", query="内存使用率过高", service="order-service")
    texts = [r.text for r in inv.retrieval_details.evidence_refs]
    assert "[11:17][WARN][order-service] 内存使用率过高: 91.0%, JVM堆内存: 3.8GB/4GB, GC次数: 128" in texts
    assert [r.raw_path for r in inv.retrieval_details.evidence_refs] == [f"$.logs[{i}]" for i in range(len(texts))]


def test_knowledge_refs(recorder):
    inv = recorder.call("lookup_knowledge", query="HikariCP 连接池", top_k=2)
    assert [r.raw_path for r in inv.retrieval_details.evidence_refs] == ["$.evidence_blocks[0]", "$.evidence_blocks[1]"]
    assert "runbooks/connection_pool.md" in inv.retrieval_details.evidence_refs[0].text


def test_no_hit_is_recorded_as_no_evidence(recorder, store):
    inv = recorder.call("query_logs", query="HikariCP", service="inventory-service")
    assert inv.success and inv.retrieval_details.evidence_status == "no_evidence"
    assert inv.retrieval_details.evidence_refs == []
    assert "inventory-service" in inv.retrieval_details.message
    assert store.list_invocations("sess-test")[0].retrieval_details.evidence_status == "no_evidence"


def test_bad_arguments_and_unknown_tools_are_recorded_as_failures(recorder, store):
    bad = recorder.call("query_logs", qurey="HikariCP")
    unknown = recorder.call("query_traces", service="x")
    invalid = recorder.call("query_logs", query="x", limit=-1)
    for inv in (bad, unknown, invalid):
        assert not inv.success and inv.retrieval_details.evidence_status == "failed"
        assert inv.output["error"]
    assert "unexpected keyword argument 'qurey'" in bad.output["error"]
    assert "unknown tool 'query_traces'" in unknown.output["error"]
    assert [i.id for i in store.list_invocations("sess-test")] == [bad.id, unknown.id, invalid.id]


def test_a_crashing_tool_is_recorded_not_raised(store):
    def explode(**_):
        raise RuntimeError("backend down")

    toolbox = TOOLBOX.with_tools(QUERY_LOGS.answered_by(explode))
    inv = ToolInvocationRecorder(store, "s", toolbox).call("query_logs", query="x")
    assert not inv.success and "backend down" in inv.output["error"]


def test_preview_is_truncated_but_refs_keep_full_text(recorder):
    inv = recorder.call("query_logs", query="health check", limit=50)
    assert len(inv.output_preview) <= PREVIEW_CHARS + 1 and inv.output_preview.endswith("…")
    assert len(inv.retrieval_details.evidence_refs) == len(inv.output["logs"]) > 10


def test_unparseable_output_keeps_a_status():
    assert extract_retrieval_details(QUERY_LOGS, "not a dict").evidence_status == "failed"
    assert extract_retrieval_details(QUERY_LOGS, {"success": True, "logs": "oops"}).evidence_status == "no_evidence"


def test_ids_are_unique_across_sessions_and_threads(store):
    ids = []
    lock = threading.Lock()

    def work(n):
        rec = ToolInvocationRecorder(store, f"sess-{n}", TOOLBOX)
        for _ in range(25):
            inv = rec.call("query_metrics", service="payment-service")
            with lock:
                ids.append(inv.id)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 200 and len(set(ids)) == 200
    assert sum(len(store.list_invocations(f"sess-{n}")) for n in range(8)) == 200


def test_the_observations_read_back_are_the_refs_and_no_hits_that_were_rendered(recorder):
    hit = recorder.call("query_logs", query="HikariCP", service="order-service")
    miss = recorder.call("query_logs", query="HikariCP", service="inventory-service")
    failed = recorder.call("query_logs", query="x", limit=-1)
    rendered = render_observations([hit, miss, failed])
    assert observed_refs(rendered) == [
        *(ObservedRef(hit.id, "query_logs", r.raw_path, r.text) for r in hit.retrieval_details.evidence_refs),
        ObservedRef(miss.id, "query_logs", None, miss.retrieval_details.message),
    ]
    assert len(hit.retrieval_details.evidence_refs) >= 2
    # Every line code writes around the refs is spotted when a claim copies it.
    heads = [line for line in rendered.splitlines() if line.startswith("#")]
    assert len(heads) == 3 and all(COPIED_OBSERVATION.search(line) for line in heads)
    assert not COPIED_OBSERVATION.search(hit.retrieval_details.evidence_refs[0].text)


def test_a_label_is_read_as_an_lm_may_write_it():
    assert canonical_label("＃3　＄.logs[1] § 2:") == citation_label(3, "$.logs[1]", 2) == "#3 $.logs[1] §2"
    assert canonical_label(" #12 no-hit ") == citation_label(12, None) == "#12 no-hit"
    assert canonical_label("#3 logs[1]") is None and canonical_label("$.logs[1]") is None
