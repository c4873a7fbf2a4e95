import json
import shutil
from datetime import datetime, timezone

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


def _overlay(tmp_path, extends="../base", **files):
    base = tmp_path / "base"
    if not base.exists():
        shutil.copytree(DEFAULT_WORLD_DIR, base)
    overlay = tmp_path / "overlay"
    overlay.mkdir(exist_ok=True)
    (overlay / "world.json").write_text(json.dumps({"extends": extends}), encoding="utf-8")
    for name, text in files.items():
        (overlay / name.replace("__", ".")).write_text(text, encoding="utf-8")
    return overlay


def test_an_overlay_adds_to_the_world_it_extends_and_its_logs_fall_in_by_time(tmp_path):
    base = load_world()
    last = base.logs[-1]["timestamp"]
    lines = [{"timestamp": last, "level": "WARN", "service": "extra-service", "message": "same time as the last"},
             {"timestamp": "2000-01-01T00:00:00+08:00", "level": "INFO", "service": "extra-service",
              "message": "before everything"}]
    overlay = _overlay(tmp_path, services__json=json.dumps([{"name": "extra-service"}]),
                       alerts__json=json.dumps([{**base.alerts[0], "service": "extra-service"}]),
                       logs__jsonl="".join(json.dumps(line) + "\n" for line in lines))
    world = load_world(overlay)
    assert world.services == (*base.services, {"name": "extra-service"})
    assert world.alerts[:len(base.alerts)] == base.alerts and world.alerts[-1]["service"] == "extra-service"
    messages = [log["message"] for log in world.logs]
    assert messages[0] == "before everything" and messages[-1] == "same time as the last"
    assert [m for m in messages if m not in ("before everything", "same time as the last")] == \
        [log["message"] for log in base.logs]
    assert world.runbooks == base.runbooks and world.runbooks_dir == (tmp_path / "base" / "runbooks").resolve()
    assert world.synonyms == base.synonyms


def test_an_overlays_own_synonyms_and_runbooks_replace_the_bases(tmp_path):
    overlay = _overlay(tmp_path, synonyms__json=json.dumps({"disk": ["disk", "volume"]}))
    (overlay / "runbooks").mkdir()
    (overlay / "runbooks" / "disk.md").write_text("# Disk full\n\n## Check\nFree the volume.\n", encoding="utf-8")
    world = load_world(overlay)
    assert world.synonyms == {"disk": ("disk", "volume")}
    assert [rb.source for rb in world.runbooks] == ["disk.md"] and world.runbooks_dir == overlay / "runbooks"


@pytest.mark.parametrize(("declared", "message"), [
    ("[]", "expected an object"),
    (json.dumps({"extends": 3}), "expected an object"),
    (json.dumps({"extends": "../nowhere"}), "not found"),
    (json.dumps({"extends": "."}), "round a loop"),
])
def test_an_overlay_that_names_no_usable_world_is_one_clear_error(tmp_path, declared, message):
    overlay = _overlay(tmp_path)
    (overlay / "world.json").write_text(declared, encoding="utf-8")
    with pytest.raises(WorldError, match=message):
        load_world(overlay)


def test_the_devset_world_is_the_fixture_world_and_only_its_own_additions():
    from devset import WORLD

    base, devset = load_world(), load_world(WORLD)
    assert not (WORLD / "runbooks").exists() and not (WORLD / "synonyms.json").exists()
    assert devset.runbooks == base.runbooks and devset.synonyms == base.synonyms
    assert devset.services[:len(base.services)] == base.services and devset.alerts[:len(base.alerts)] == base.alerts
    ids = [(log["timestamp"], log["message"]) for log in devset.logs]
    assert [i for i in ids if i in {(b["timestamp"], b["message"]) for b in base.logs}] == \
        [(b["timestamp"], b["message"]) for b in base.logs]
    assert len(devset.service_names - base.service_names) == 8


def test_an_overlays_line_in_another_offset_falls_in_at_its_instant(tmp_path):
    base = load_world()
    first = base.logs[0]["timestamp"]
    assert first.endswith("+08:00")
    same = datetime.fromisoformat(first).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = {"timestamp": same, "level": "INFO", "service": "extra-service", "message": "the first instant, in UTC"}
    world = load_world(_overlay(tmp_path, logs__jsonl=json.dumps(line) + "\n"))
    assert [log["message"] for log in world.logs][:2] == [base.logs[0]["message"], "the first instant, in UTC"]
    assert world.logs[1]["source"] == "overlay/logs.jsonl:1"
