from kudu_async.common.metrics import MetricRegistry


def test_metrics_json_uses_kudu_entity_shape_and_filters() -> None:
    reg = MetricRegistry()
    ent = reg.entity("server", "kudu.tabletserver", {"uuid": "u1"})
    ent.counter("rpc_calls_Generic_Ping").increment(3)
    h = ent.histogram("handler_latency_Generic_Ping")
    for v in (50, 150, 900):
        h.record(v)
    reg.entity("tablet", "t1").counter("rows_inserted").increment()
    out = reg.to_json()
    assert {e["type"] for e in out} == {"server", "tablet"}
    server = next(e for e in out if e["type"] == "server")
    assert server["id"] == "kudu.tabletserver" and server["attributes"] == {"uuid": "u1"}
    by_name = {m["name"]: m for m in server["metrics"]}
    assert by_name["rpc_calls_Generic_Ping"]["value"] == 3
    hist = by_name["handler_latency_Generic_Ping"]
    assert hist["total_count"] == 3 and hist["min"] == 50 and hist["max"] == 900
    assert 50 <= hist["percentile_75"] <= 1000
    assert [e["id"] for e in reg.to_json(metrics=["rows_"])] == ["t1"]
    assert [e["id"] for e in reg.to_json(types=["server"])] == ["kudu.tabletserver"]
    assert reg.to_json(ids=["nope"]) == []


def test_prometheus_text_has_types_and_histogram_buckets() -> None:
    reg = MetricRegistry()
    ent = reg.entity("server", "kudu.master")
    ent.counter("rpc_calls_X_Y", "calls").increment(2)
    ent.histogram("handler_latency_X_Y").record(20)
    text = reg.to_prometheus()
    assert "# TYPE kudu_rpc_calls_X_Y counter" in text
    assert 'kudu_rpc_calls_X_Y{entity_type="server",entity_id="kudu.master"} 2' in text
    assert "# TYPE kudu_handler_latency_X_Y histogram" in text
    assert 'le="+Inf"} 1' in text and "kudu_handler_latency_X_Y_count" in text
