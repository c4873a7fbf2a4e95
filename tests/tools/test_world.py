import json
import shutil

import pytest

from tools.sources.fixture import DEFAULT_WORLD_DIR, WorldError, load_world


def test_world_is_big_enough_and_has_the_named_services():
    world = load_world()
    assert len(world.services) >= 6
    assert {"payment-service", "order-service", "user-service", "inventory-service"} <= world.service_names
    assert len(world.logs) >= 200
    assert {rb.source for rb in world.runbooks} >= {"high_cpu.md", "high_memory.md", "slow_response.md", "connection_pool.md"}
    for alert in world.alerts:
        assert alert["service"] in world.service_names
    for log in world.logs:
        assert log["service"] in world.service_names


def test_every_value_the_seed_quotes_appears_verbatim():
    world = load_world()
    memory = next(a for a in world.alerts if a["name"] == "HighMemoryUsage" and a["service"] == "order-service")
    assert (memory["current"], memory["duration"]) == ("91%", "15m")
    assert memory["samples"][0] == 86.2 and memory["samples"][-1] == 91.0
    assert "3.8GB/4GB" in memory["description"] and "Full GC 15 times" in memory["description"]
    assert "850ms" in memory["description"]
    slow = next(a for a in world.alerts if a["name"] == "SlowResponse")
    assert slow["current"] == "P99=4.2s" and slow["duration"] == "10m" and slow["state"] == "firing"
    messages = [(log["service"], log["message"]) for log in world.logs]
    assert ("order-service", "内存使用率过高: 91.0%, JVM堆内存: 3.8GB/4GB, GC次数: 128") in messages
    assert ("order-service", "HikariPool-1 - Connection is not available, request timed out after 30000ms") in messages
    assert ("order-service", "HikariCP pool stats: active=50/50, idle=0, waiting=32") in messages
    slow_lines = " ".join(m for s, m in messages if s == "user-service")
    for endpoint, values in (("profile", (3600, 3900, 4200)), ("orders", (3750, 4050))):
        for value in values:
            assert f"GET /api/v1/users/{endpoint} took {value}ms" in slow_lines


def test_red_herrings_exist():
    text = "\n".join(log["message"] for log in load_world().logs)
    for needle in ("Order 123", "OutOfMemoryError", "Slow query", "health check ok"):
        assert needle in text


@pytest.mark.parametrize(
    ("filename", "content", "expected"),
    [
        ("alerts.json", "[{", "not valid JSON"),
        ("alerts.json", json.dumps([{"name": "X"}]), "missing field(s)"),
        ("logs.jsonl", '{"timestamp": "t", "level": "LOUD", "service": "s", "message": "m"}\n', "level 'LOUD'"),
        ("logs.jsonl", "not json\n", "logs.jsonl:1 is not valid JSON"),
    ],
)
def test_broken_fixture_files_give_clear_errors(tmp_path, filename, content, expected):
    world_dir = tmp_path / "world"
    shutil.copytree(DEFAULT_WORLD_DIR, world_dir)
    (world_dir / filename).write_text(content, encoding="utf-8")
    with pytest.raises(WorldError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        load_world(world_dir)


def test_missing_world_directory(tmp_path):
    with pytest.raises(WorldError, match="not found"):
        load_world(tmp_path / "nowhere")
