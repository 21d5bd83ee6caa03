"""A classic group member's session ends at its deadline (last heartbeat or commit + the session
timeout), as Kafka's timers end it, not up to a polling period later: librdkafka's 0081 closes
static members, waits the session timeout and deletes their groups, which must be Empty then."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_group_admin import _open, _subscription  # noqa: E402

from logcore.coordinator.group import EMPTY  # noqa: E402
from logcore.wire import error_codes as E  # noqa: E402

SESSION_MS = 300
GROUPS = 5
STAGGER_S = 0.02      # the members join 20 ms apart: their deadlines fall at every phase of a poll
LATE_S = 0.04         # how late an expiry may be seen here (a loaded machine); a 0.1 s poll is later


def test_static_members_expire_at_their_session_deadline(tmp_path):
    pm, gc, _clock = _open(tmp_path)

    async def run():
        loop = asyncio.get_running_loop()
        await gc.start()
        try:
            deadlines = {}
            for i in range(GROUPS):
                group = f"static-{i}"
                joined = await gc.join(group_id=group, member_id="", group_instance_id=f"instance-{i}",
                                       client_id="c", client_host="", session_timeout_ms=SESSION_MS,
                                       rebalance_timeout_ms=1_000, protocol_type="consumer",
                                       protocols=[("range", _subscription("data"))], require_known_member=False)
                assert joined["error_code"] == E.NONE, joined
                mid = joined["member_id"]
                synced = await gc.sync(group_id=group, generation_id=joined["generation_id"], member_id=mid,
                                       assignments=[(mid, b"a")], group_instance_id=f"instance-{i}")
                assert synced["error_code"] == E.NONE
                # the last sign of life: a commit (a static member closing commits, then says nothing)
                assert gc.check_commit(group, joined["generation_id"], mid, f"instance-{i}") == E.NONE
                deadlines[group] = loop.time() + SESSION_MS / 1000
                await asyncio.sleep(STAGGER_S)
            seen_empty = {}
            while len(seen_empty) < GROUPS and loop.time() < max(deadlines.values()) + 1:
                for group in deadlines:
                    if group not in seen_empty and gc.groups[group].state == EMPTY:
                        seen_empty[group] = loop.time()
                await asyncio.sleep(0.002)
            late = {g: round(seen_empty.get(g, float("inf")) - d, 3) for g, d in deadlines.items()}
            assert all(-0.005 <= s <= LATE_S for s in late.values()), late
        finally:
            await gc.stop()
    asyncio.run(run())
    pm.close()
