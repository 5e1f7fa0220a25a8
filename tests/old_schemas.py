"""The schemas of earlier releases, as their files have them: data for migration tests
(the code's own schema moves on; these never change)."""

#: versions 1 and 2 (before the event log was split in two); a version 1 file carries
#: its version in `meta` instead of the pragmas
SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS breakers (
    provider TEXT PRIMARY KEY, state TEXT NOT NULL, failures INTEGER NOT NULL,
    last_failure_at INTEGER, opened_at INTEGER, open_for_ms INTEGER NOT NULL,
    cycles INTEGER NOT NULL, epoch INTEGER NOT NULL, forced_until INTEGER
);
CREATE TABLE IF NOT EXISTS connections (
    provider TEXT NOT NULL, connection TEXT NOT NULL, level INTEGER NOT NULL,
    cooling_until INTEGER NOT NULL, disabled INTEGER NOT NULL, disabled_reason TEXT,
    last_error TEXT, last_error_at INTEGER, PRIMARY KEY (provider, connection)
);
CREATE TABLE IF NOT EXISTS lockouts (
    provider TEXT NOT NULL, connection TEXT NOT NULL, model TEXT NOT NULL, kind TEXT,
    failures INTEGER NOT NULL, last_failure_at INTEGER NOT NULL, until INTEGER NOT NULL,
    PRIMARY KEY (provider, connection, model)
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL, actor TEXT NOT NULL,
    action TEXT NOT NULL, target TEXT NOT NULL, result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t INTEGER NOT NULL, type TEXT NOT NULL,
    body TEXT NOT NULL
);
"""
