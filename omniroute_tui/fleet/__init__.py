"""A fleet replica's protocol, sans-IO (docs/design.md §10): `commands` (the operator
actions a replica shares, typed) and `peer` (what a replica shares, how it applies what it
hears, the probe lease decision). The simulated fleet and the Redis link both drive one
`FleetPeer`; only the transport differs.

Nothing is re-exported here: the engine imports `commands`, and `peer` imports the engine.
"""
