"""A provider's API family and the settings only one family has (docs/design.md §13):
`api`, `api_version` and `deployments` (Azure), `anthropic_version` (Anthropic)."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Any

from ..apis import ApiFamily
from .limits import MAX_COUNTS
from .problems import Path
from .readers import read_mapping, read_name, read_str
from .yaml_source import Source

__all__ = ["API_FIELDS", "DEFAULT_ANTHROPIC_VERSION", "DEFAULT_AZURE_API_VERSION",
           "ApiSettings", "parse_api"]

#: Azure OpenAI's generally available data-plane version when this was written
DEFAULT_AZURE_API_VERSION = "2024-10-21"
#: the `anthropic-version` header Anthropic's SDKs send
DEFAULT_ANTHROPIC_VERSION = "2023-06-01"
#: the provider fields read here, and the one family each belongs to (None: any)
API_FIELDS: dict[str, ApiFamily | None] = {
    "api": None, "api_version": ApiFamily.AZURE, "deployments": ApiFamily.AZURE,
    "anthropic_version": ApiFamily.ANTHROPIC,
}
#: an API version as both write them: a date, with a suffix such as `-preview`
_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(?:-[a-z]+)?$")
#: an Azure deployment name as Azure takes it (letters, digits, `-`, `_`, `.`)
_DEPLOYMENT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class ApiSettings:
    """How a provider is reached: its family, and that family's own settings."""

    family: ApiFamily = ApiFamily.OPENAI
    api_version: str = DEFAULT_AZURE_API_VERSION
    #: Azure: the deployment that serves each model (a model not named is its own)
    deployments: dict[str, str] = field(default_factory=dict)
    anthropic_version: str = DEFAULT_ANTHROPIC_VERSION

    def deployment(self, model: str) -> str:
        return self.deployments.get(model, model)


def parse_api(src: Source, body: dict[str, Any], where: Path) -> ApiSettings:
    """The family settings of a provider's mapping `body`; a field of another family
    than the provider's is refused (it would be ignored, and mislead its reader)."""
    family = ApiFamily.OPENAI
    if "api" in body:
        try:
            family = ApiFamily(body["api"])
        except (ValueError, TypeError):
            src.problem(where + ("api",), "expected one of "
                        f"{', '.join(f.value for f in ApiFamily)}, got {str(body['api'])[:40]!r}")
            return ApiSettings()
    settings: dict[str, Any] = {}
    for name, only in API_FIELDS.items():
        if name not in body or only is None:
            continue
        if only is not family:
            src.problem(where + (name,), f"only an `api: {only.value}` provider has "
                                         f"{name}; this one is `api: {family.value}`")
            continue
        if name == "deployments":
            settings[name] = _deployments(src, body[name], where + (name,))
        else:
            version = _version(src, body[name], where + (name,))
            if version is not None:
                settings[name] = version
    return ApiSettings(family, **settings)


def _version(src: Source, value: Any, path: Path) -> str | None:
    if isinstance(value, datetime.date):  # YAML reads an unquoted 2024-10-21 as a date
        value = value.isoformat()
    text = read_str(src, value, path)
    if text is not None and not _VERSION.fullmatch(text):
        src.problem(path, f"expected a version such as 2024-10-21, got {text[:40]!r}")
        return None
    return text


def _deployments(src: Source, value: Any, path: Path) -> dict[str, str]:
    mapping = read_mapping(src, value, path) or {}
    if len(mapping) > MAX_COUNTS["models per provider"]:
        src.problem(path, f"at most {MAX_COUNTS['models per provider']:,} deployments")
        return {}
    result: dict[str, str] = {}
    for model, deployment in mapping.items():
        at = path + (str(model),)
        name = read_name(src, str(model), at, "a model name")
        text = read_str(src, deployment, at)
        if name is None or text is None:
            continue
        if not _DEPLOYMENT.fullmatch(text):
            src.problem(at, "a deployment name is letters, digits, '-', '_' or '.', at most "
                            f"64 of them, got {text[:40]!r}")
            continue
        result[name] = text
    return result
