"""The fleet's outgoing queue (omniroute_tui/fleet/outbox.py): bounded in entries
and bytes; when full it coalesces superseded state changes, then drops plain events, then
state changes, operator actions last, and counts what it dropped."""

from __future__ import annotations

from omniroute_tui.fleet.outbox import Change, ChangeKind, Outbox


def cooldown(connection: str, until: int) -> Change:
    return Change(f'{{"c":"{connection}","until":{until}}}', ChangeKind.STATE,
                  f"connection:p/{connection}", until, "max")


def result(n: int) -> Change:
    return Change(f'{{"result":{n}}}', ChangeKind.EVENT)


def operator(n: int) -> Change:
    return Change(f'{{"operator":{n:05d}}}', ChangeKind.OPERATOR)


def drain(outbox: Outbox) -> list[Change]:
    sent: list[Change] = []
    while len(outbox):
        sent += outbox.take()
        outbox.done()
    return sent


def test_a_full_queue_coalesces_then_drops_events_then_state_never_operators_first() -> None:
    outbox = Outbox(10_000)
    changes: list[Change] = []
    for i in range(20_000):  # 10,000 results, 8,000 cooldowns of 97 keys, 2,000 actions
        if i % 10 < 5:
            changes.append(result(i))
        elif i % 10 < 9:
            changes.append(cooldown(f"k{i % 97}", 1_000 + i))
        else:
            changes.append(operator(i))
    for change in changes:
        outbox.put(change, now=7)
    assert len(outbox) == 10_000
    sent = drain(outbox)
    assert [c for c in sent if c.kind is ChangeKind.OPERATOR] == [
        c for c in changes if c.kind is ChangeKind.OPERATOR]
    latest = {c.field: c for c in changes if c.field is not None}
    kept = [c for c in sent if c.kind is ChangeKind.STATE]
    assert {c.field: c for c in kept} == latest and len(kept) == 97  # the latest of each
    results = [c for c in sent if c.kind is ChangeKind.EVENT]
    assert results == [c for c in changes if c.kind is ChangeKind.EVENT][-len(results):]
    assert outbox.coalesced == 8_000 - 97
    assert outbox.dropped == {ChangeKind.EVENT: 10_000 - len(results),
                              ChangeKind.STATE: 0, ChangeKind.OPERATOR: 0}
    assert len(results) == 10_000 - 2_000 - 97
    assert outbox.health()["dropped"] == 2_097 and outbox.dropped_since == 7


def test_a_shorter_deadline_does_not_supersede_a_longer_one() -> None:
    outbox = Outbox(2)
    outbox.put(cooldown("a", 5_000), 1)
    outbox.put(cooldown("a", 3_000), 1)  # the state hash keeps 5,000: nothing to coalesce
    outbox.put(result(1), 1)
    assert outbox.coalesced == 0 and outbox.dropped[ChangeKind.EVENT] == 1
    assert [c.order for c in drain(outbox)] == [5_000, 3_000]


def test_operators_go_last_and_the_queue_is_bounded_in_bytes() -> None:
    outbox = Outbox(100, max_bytes=10 * operator(0).size)
    for i in range(12):
        outbox.put(operator(i), 1)
    outbox.put(result(1), 2)
    assert outbox.bytes <= outbox.max_bytes
    assert outbox.dropped == {ChangeKind.EVENT: 1, ChangeKind.STATE: 0,
                              ChangeKind.OPERATOR: 2}
    assert [c.data for c in drain(outbox)] == [operator(i).data for i in range(2, 12)]
    assert outbox.dropping == 0  # everything queued went out


def test_a_failed_batch_goes_back_in_front_and_still_coalesces() -> None:
    outbox = Outbox(3, batch_entries=2)
    outbox.put(cooldown("a", 1), 1)
    outbox.put(result(1), 1)
    batch = outbox.take()
    outbox.put(cooldown("a", 2), 1)
    outbox.give_back(batch)  # Redis failed: in front again, and a(1) is superseded
    outbox.put(operator(1), 1)
    outbox.put(operator(2), 1)
    assert outbox.coalesced == 1 and outbox.dropped[ChangeKind.EVENT] == 1
    assert [c.data for c in drain(outbox)] == [
        cooldown("a", 2).data, operator(1).data, operator(2).data]
