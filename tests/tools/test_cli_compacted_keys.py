"""`seglog produce` to a compacted topic: records need a key, as on Kafka's broker; the refusal
names the topic, its cleanup.policy and the option to use, and writes nothing."""
from __future__ import annotations

import io
import sys

import pytest

from logcore.tools.cli import main


def seglog(capsys, monkeypatch, *argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_produce_without_keys_to_a_compacted_topic_is_refused(tmp_path, capsys, monkeypatch, policy):
    root = str(tmp_path / "root")
    code, _, err = seglog(capsys, monkeypatch, "topics", "--root", root, "--create", "users",
                          "--partitions", "2", "--config", f"cleanup.policy={policy}")
    assert code == 0, err
    code, out, err = seglog(capsys, monkeypatch, "produce", "--root", root, "--topic", "users",
                            stdin=b"alice\nbob\n")
    assert code == 1
    assert err.startswith("seglog: error: topic users has cleanup.policy=" + policy)
    assert "without a key" in err and "--key-separator" in err
    assert "Traceback" not in err
    code, out, err = seglog(capsys, monkeypatch, "consume", "--root", root, "--topic", "users",
                            "--from-beginning")
    assert code == 0 and out == "" and "Processed a total of 0 messages" in err

    # With keys it works, and the keys are kept.
    code, _, err = seglog(capsys, monkeypatch, "produce", "--root", root, "--topic", "users",
                          "--key-separator", ":", stdin=b"u1:alice\nu2:bob\nu1:alice2\n")
    assert code == 0, err
    code, out, err = seglog(capsys, monkeypatch, "consume", "--root", root, "--topic", "users",
                            "--from-beginning", "--print-key", "--key-separator", "=")
    assert code == 0, err
    assert sorted(out.splitlines()) == ["u1=alice", "u1=alice2", "u2=bob"]


def test_produce_without_keys_to_a_delete_topic_works(tmp_path, capsys, monkeypatch):
    root = str(tmp_path / "root")
    assert seglog(capsys, monkeypatch, "topics", "--root", root, "--create", "events",
                  "--partitions", "1")[0] == 0
    code, _, err = seglog(capsys, monkeypatch, "produce", "--root", root, "--topic", "events",
                          stdin=b"a\nb\n")
    assert code == 0, err
    code, out, _ = seglog(capsys, monkeypatch, "consume", "--root", root, "--topic", "events",
                          "--from-beginning")
    assert out.splitlines() == ["a", "b"]
