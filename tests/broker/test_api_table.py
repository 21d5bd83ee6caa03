"""The API tables of docs/broker.md and docs/cli.md are what `python -m logcore.broker.api_table`
prints from api_versions.py, and api_versions.py is what a running broker advertises (alone:
SERVED; a cluster member's CLUSTER_SERVED is checked in tests/cluster/test_describe_cluster.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from logcore.broker import api_table
from logcore.broker.api_versions import CLUSTER_SERVED, SERVED, advertised, cluster_served
from logcore.wire.client import KafkaConnection

REPO = Path(__file__).resolve().parents[2]
DOCS = {"broker": REPO / "docs" / "broker.md", "cli": REPO / "docs" / "cli.md"}
REGENERATE = "regenerate with: python -m logcore.broker.api_table --update docs/broker.md docs/cli.md"


@pytest.mark.parametrize("style", sorted(DOCS))
def test_docs_hold_the_generated_table(style):
    text = DOCS[style].read_text(encoding="utf-8")
    found = api_table.marked(text, style)
    assert found is not None, f"{DOCS[style].name} has no {api_table.BEGIN.format(style=style)} marker"
    assert found == api_table.table(style), f"{DOCS[style].name}'s API table is stale: {REGENERATE}"


def test_every_served_api_has_a_row_and_nothing_else():
    for style in api_table.STYLES:
        lines = api_table.table(style).splitlines()[2:]
        keys = [int(line.split("|")[1]) for line in lines]
        assert keys == sorted(cluster_served()), style
    assert not set(CLUSTER_SERVED) & set(SERVED)


def test_update_rewrites_only_the_marked_table(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("before\n<!-- api-table:cli -->\nold rows\n<!-- /api-table -->\nafter\n")
    proc = subprocess.run([sys.executable, "-m", "logcore.broker.api_table", "--update", str(doc)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert doc.read_text() == ("before\n<!-- api-table:cli -->\n" + api_table.table("cli")
                               + "<!-- /api-table -->\nafter\n")
    unmarked = tmp_path / "plain.md"
    unmarked.write_text("no table\n")
    proc = subprocess.run([sys.executable, "-m", "logcore.broker.api_table", "--update", str(unmarked)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 1 and "no <!-- api-table:... --> marker" in proc.stderr
    assert unmarked.read_text() == "no table\n"


def test_a_broker_alone_advertises_exactly_served(broker):
    """What ApiVersions lists is api_versions.SERVED: no cluster-only API, nothing unlisted."""
    with KafkaConnection(broker.host, broker.port, timeout_s=10).connect() as conn:
        listed = sorted((k, lo, hi) for k, (lo, hi) in conn.served.items())
    assert listed == advertised(SERVED)
    assert not set(CLUSTER_SERVED) & {k for k, _, _ in listed}
