"""Reading an exposition back: every sample by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(exposition: bytes) -> Samples:
    """Every sample of a text exposition, by name and label set."""
    found: Samples = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in found, f"{key} twice"
            found[key] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of `name` with exactly these labels (`from_` is `from`)."""
    wanted = frozenset((k.rstrip("_"), v) for k, v in labels.items())
    try:
        return samples[(name, wanted)]
    except KeyError:
        near = sorted((dict(k[1]) for k in samples if k[0] == name), key=str)[:10]
        raise AssertionError(f"no {name}{dict(wanted)}; there are {near}") from None


def series(samples: Samples, name: str) -> list[dict[str, str]]:
    """The label sets of every sample of `name`."""
    return [dict(labels) for n, labels in samples if n == name]
