"""conf/grafana-seglog.json queries only metrics a broker exports (docs/metrics.md): every metric
name in its Prometheus expressions is a series name of a real broker's exposition (a broker
alone, its registry read without HTTP), and its JSON is a Grafana dashboard's shape."""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from logcore.broker.config import BrokerConfig
from logcore.broker.server import BrokerServer

DASHBOARD = Path(__file__).resolve().parents[2] / "conf" / "grafana-seglog.json"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
# The series a family of each type writes (a family without samples yet still has its names).
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("_sum", "_count", "_created", ""), "untyped": ("",)}
PROMQL_WORDS = {"sum", "by", "rate", "max", "min", "histogram_quantile", "le", "on", "group_right", "without",
                "avg", "count", "increase", "irate"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> set[str]:
    base = tmp_path_factory.mktemp("dash")
    config = BrokerConfig.from_props({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(base / "logs")},
                                     source="test")

    async def exposition() -> str:
        server = BrokerServer(config)
        await server.start()
        try:
            return server.metrics.exposition().decode()
        finally:
            await server.stop()

    names = set()
    for family in text_string_to_metric_families(asyncio.run(exposition())):
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def _metric_names(expr: str) -> set[str]:
    """Identifiers of a PromQL expression that are metric names (not functions, label names
    inside braces or by (...) lists, or strings)."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    return {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if w not in PROMQL_WORDS}


def test_every_queried_metric_is_exported(exported):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"] and dashboard["title"]
    queried = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = _metric_names(target["expr"])
            assert names, target["expr"]
            queried |= names
    assert queried - exported == set()
    assert len(queried) >= 20


def test_docs_list_every_exported_family(exported):
    """docs/metrics.md names every metric family the broker exports."""
    text = DOCS.read_text()
    families = {n for n in exported if not n.endswith(("_created", "_bucket", "_sum", "_count"))}
    missing = []
    for name in sorted(families):
        if f"`{name.removesuffix('_total')}" not in text:
            missing.append(name)
    assert missing == []


def test_the_name_check_finds_metric_names():
    assert _metric_names('sum by (le, request) (rate(a_b_bucket{x="y"}[5m])) / on (topic) c') == {"a_b_bucket", "c"}
