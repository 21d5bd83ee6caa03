"""checker.py's consumer-group point (10): committed offsets never below the latest acknowledged commit."""
from __future__ import annotations

from checker import check


def _h(*events):
    out = []
    for t, ev in enumerate(events, 1):
        out.append({"t": t * 10, **ev})
    return out


FINAL = {0: {"start": 0, "records": [], "complete": True}}


def test_a_read_below_an_acknowledged_commit_is_a_regression():
    res = check(_h({"f": "commit", "type": "ok", "group": "g", "key": 0, "offset": 40, "proc": "g0.0"},
                   {"f": "committed", "type": "ok", "group": "g", "key": 0, "offset": 30, "since": 15,
                    "proc": "g1.0"}), FINAL)
    assert res.counts == {"commit-regression": 1}
    assert res.anomalies["commit-regression"][0]["committed"] == 40


def test_a_missing_offset_after_an_acknowledged_commit_is_lost():
    res = check(_h({"f": "commit", "type": "ok", "group": "g", "key": 0, "offset": 40},
                   {"f": "committed", "type": "ok", "group": "g", "key": 0, "offset": -1001, "since": 15,
                    "proc": "final"}), FINAL)
    assert res.counts == {"commit-lost": 1}


def test_commits_acknowledged_after_the_read_began_or_not_acknowledged_do_not_count():
    res = check(_h({"f": "commit", "type": "ok", "group": "g", "key": 0, "offset": 10},
                   {"f": "commit", "type": "info", "group": "g", "key": 0, "offset": 90, "error": "TIMED_OUT"},
                   {"f": "commit", "type": "ok", "group": "g", "key": 0, "offset": 50},      # t=30
                   {"f": "committed", "type": "ok", "group": "g", "key": 0, "offset": 10, "since": 25},
                   {"f": "committed", "type": "ok", "group": "h", "key": 0, "offset": -1001, "since": 45},
                   {"f": "committed", "type": "ok", "group": "g", "key": 0, "offset": 60, "since": 55}), FINAL)
    assert res.valid, res.summary()
    assert res.stats["commits_ok"] == 2 and res.stats["committed_reads"] == 3


def test_a_lower_offset_committed_on_purpose_later_is_no_regression():
    res = check(_h({"f": "commit", "type": "ok", "group": "g", "key": 0, "offset": 40},
                   {"f": "commit", "type": "ok", "group": "g", "key": 0, "offset": 12},
                   {"f": "committed", "type": "ok", "group": "g", "key": 0, "offset": 12, "since": 25}), FINAL)
    assert res.valid, res.summary()
