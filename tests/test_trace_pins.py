"""The shipped scenarios' traces, pinned: a change that alters one must say so."""

from __future__ import annotations

import hashlib

import pytest

from .shipped_runs import shipped_run

#: sha256 of each shipped scenario's trace under the resilient policy (seed from the file);
#: `demo` and `hour-long-mixed` re-pinned when their routes came to spread requests by
#: weight, so that every fault of theirs meets traffic (their faults on fallbacks saw none);
#: `vpn-blip` and `hour-long-mixed` re-pinned when a provider with every key cooling came to
#: be tried at its breaker's cadence (docs/design.md §4): their keys all cool at once;
#: `provider-outage`, `quota-exhaustion` and `slow-provider`, whose routes name no
#: strategy, re-pinned when the default came to spread a provider's requests over its keys
#: (`round_robin`; CHANGELOG.md says what each one's figures did); `retry-budget` names
#: `priority` since, and keeps its trace
#: `stream-faults` pinned as it first shipped, with the simulator's stream faults;
#: `mixed-families` as it first shipped, with the fakes of each API family
PINNED = {
    "mixed-families": "737ad79ac1759685fb23b0c535677d831e6505a33e6a3f184bf8e229c0a961d8",
    "stream-faults": "c1ee16d7901cceedab926c9ce2ce4644f1eafe64a6b26202789306fa59e0d9d5",
    "fleet-429-storm": "e056419a2b6a16a01f4b90c352515820be3f2f0a022eb1a9400423ddabf027fb",
    "429-storm": "1e5057bb2a9f91dbc50c92b29059b05028c6f50ae270aa8d7e15a4c03953ffe7",
    "auth-revoked": "34a7dad5abf4d6f5c9c09e3d09caad6ebc6cbe31592f0acf073cca47f6be69d1",
    "demo": "d512bd984cd8ef20118888876122230b19926cf572b8ac21cc9cf8a391c7f72d",
    "hour-long-mixed": "7f84ef42b6eb292b1b19de29bd6108e1a84626da0cb2be6a8262b1682f0b17e1",
    "herd": "09c16ee22346d8a803789dd3ea347fb86e1ef7c0cb87d29b3580c02e44f18873",
    "provider-outage": "3a183aa76fe28e6ba56f95de0ba811467b71e139721a98cfc0c4b8a28e5718cc",
    "quota-exhaustion": "755f520c2b2f6072cb025a10ee7f529223fd656c5e38015b6f37d483991ae067",
    "rate-limit-headroom": "28dbf6ce7b225ed033a2524077200af58c671b88e1198b38556a6d6c9c5da3dd",
    "slow-provider": "7f92790a1da3245c9400daff8d47d5c7cb36555e14d5c018b8ef3a5916d44254",
    "vpn-blip": "7fa320f0875ff67d600c934770c0c2c4738bae1748ccdca9f70c0af31cdbb02c",
    "retry-budget": "78531a943a739c28485072cfe0f46d757d87cc7db7158912958754e96fb60929",
}
#: the same traces without their `budget` and `wait` lines (added by the console's "why"
#: view): for the scenarios older than those events, exactly the traces pinned before them
#: (re-pinned with the quick probes of docs/design.md §3: `provider-outage`, whose breaker
#: opens without a hint and whose probes meet cooling keys, and `fleet-429-storm`, whose
#: breakers open on failures heard from other replicas, which carry no hint; and `demo`
#: and `hour-long-mixed` with their weighted routes, and with `vpn-blip` for the keys that
#: all cool at once, as above)
WITHOUT_WHY = {
    "mixed-families": "737ad79ac1759685fb23b0c535677d831e6505a33e6a3f184bf8e229c0a961d8",
    "stream-faults": "c1ee16d7901cceedab926c9ce2ce4644f1eafe64a6b26202789306fa59e0d9d5",
    "fleet-429-storm": "6a546c1d13c42a7087c7dcd4e1539bb7c9000f885817d2eacf22c5bec6c7f9d7",
    "429-storm": "989c70eb443adcd4ed739b0bf539e0eb3631657eddfbfaf232a20bb6bb2a9b95",
    "auth-revoked": "07d91e789ec5212cc0a1574efad3898bd969e0aad3c5845edd6f6cf78c72de09",
    "demo": "bf21db4ffe14d5c0688bd883c90b29725695a0149a9fa473335ae504f8df0c0e",
    "hour-long-mixed": "daa1818729405e7bf93bd169062418234d12e73d475f13a4709fd7e37bd0049a",
    "herd": "09c16ee22346d8a803789dd3ea347fb86e1ef7c0cb87d29b3580c02e44f18873",
    "provider-outage": "3a183aa76fe28e6ba56f95de0ba811467b71e139721a98cfc0c4b8a28e5718cc",
    "quota-exhaustion": "b0ce1af0ac43864434298720f8d3cfe5298c0e7975720522486b33030452e14b",
    "rate-limit-headroom": "28dbf6ce7b225ed033a2524077200af58c671b88e1198b38556a6d6c9c5da3dd",
    "slow-provider": "7f92790a1da3245c9400daff8d47d5c7cb36555e14d5c018b8ef3a5916d44254",
    "vpn-blip": "7fa320f0875ff67d600c934770c0c2c4738bae1748ccdca9f70c0af31cdbb02c",
    "retry-budget": "fd05048134be6e6f05f31a62c0aa406aa67f5c2b9a4b045494acda7530b499a9",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_shipped_traces_are_byte_identical_to_the_pinned_ones(name: str) -> None:
    trace = shipped_run(name).trace  # run_virtual(scenario, "resilient", trace=...)
    assert hashlib.sha256(trace.encode()).hexdigest() == PINNED[name]
    without = "".join(line for line in trace.splitlines(keepends=True)
                      if '"type":"budget"' not in line and '"type":"wait"' not in line)
    assert hashlib.sha256(without.encode()).hexdigest() == WITHOUT_WHY[name]
