"""What a replay says of the commit a run was recorded at (optimization/replay.py)."""

import subprocess

from optimization.replay import checkout, other_checkout


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_a_run_names_its_commit_and_a_replay_elsewhere_says_so(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "logs.jsonl").write_text("one\n")
    _git(tmp_path, "add", "logs.jsonl")
    _git(tmp_path, "commit", "-q", "-m", "one")
    then = checkout(tmp_path)
    assert then["modified"] is False and len(then["commit"]) == 40
    run = {"meta": {"checkout": then}}
    assert other_checkout(run, checkout(tmp_path)) is None

    (tmp_path / "logs.jsonl").write_text("two\n")
    edited = checkout(tmp_path)
    assert edited == {"commit": then["commit"], "modified": True}
    assert "(modified)" in other_checkout(run, edited)

    _git(tmp_path, "commit", "-q", "-am", "two")
    later = checkout(tmp_path)
    said = other_checkout(run, later)
    assert later["commit"] != then["commit"]
    assert then["commit"][:12] in said and later["commit"][:12] in said


def test_outside_a_checkout_nothing_is_claimed(tmp_path):
    assert checkout(tmp_path / "absent") is None
    # A run recorded before runs named their commit says nothing of it.
    assert other_checkout({"meta": {}}, {"commit": "a" * 40, "modified": False}) is None
