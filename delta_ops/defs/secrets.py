"""Secrets in the table registry: storage options and Spark conf values that hold secrets
come only from environment variables (`EnvRef`), and only the values of known public keys
are ever shown (Dagster metadata, logs, errors, `repr`); every other value is `<redacted>`.

Two rules, decided by what a key may hold rather than by a list of secret names:

- Shown: only the keys known to be harmless (`PUBLIC_STORAGE_OPTIONS`,
  `PUBLIC_SPARK_CONF`: where the store is and how it is reached, sizing) show their values.
  Every other key may hold a secret, whatever its name (`profile`, `secretkey`,
  `x-api-key`), so its value is `<redacted>` in Dagster metadata, error messages, and the
  `repr` and `str` of the registry's objects (`RedactedOptions`, `redacted_repr_args`),
  which is what a traceback or a debugger prints.
- Literal: a key whose name looks like a credential (`is_secret_option`: it contains
  "secret", "token", "passw", "credential", "auth", "key", ... anywhere, in any case and
  with any separators) takes only an environment variable reference `{env: NAME}`, never
  a literal value, which would sit in a file that is read, copied and committed. Other keys
  take literal values (redacted all the same when shown).

No dagster import.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from pydantic import Field

from delta_ops.defs.policy import StrictModel
from delta_ops.errors import MissingSecretError

#: What in an option's name says it may hold a credential, found anywhere in the name once
#: it is lower-cased and stripped of separators (`SECRET_KEY`, `secretkey`, `x-api-key`,
#: `password2`, `aws.session.token`). Over-broad on purpose: a false alarm costs an
#: environment variable, a miss leaves a secret in a file.
_SECRET_FRAGMENTS = (
    "secret", "token", "passw", "pwd", "credential", "auth", "key", "signature", "private",
)
#: ... or as a whole word of the name (split at separators): too short to look for inside.
_SECRET_WORDS = frozenset({"sas", "sig", "pass", "pin"})
#: Option names that contain "key" but hold no secret (identifiers and prefixes).
_NOT_SECRET_OPTIONS = frozenset({"keyprefix", "ssekmskeyid", "kmskeyid"})

#: Storage options whose values are shown (UI metadata, logs); every other value is
#: redacted, whatever its name. Only where the store is and how it is reached: an operator
#: needs them to diagnose a failure, and none of them grants access (user information in
#: an endpoint URL is redacted all the same).
PUBLIC_STORAGE_OPTIONS = frozenset({
    "endpoint_url", "endpoint", "aws_endpoint_url", "aws_endpoint",
    "region", "region_name", "aws_region", "anon", "use_ssl", "allow_http",
})
#: Spark conf keys whose values are shown: sizing, parallelism and the S3A endpoint and
#: region. Everything else (credentials providers, tokens, arbitrary `spark.hadoop.*`) is
#: redacted.
PUBLIC_SPARK_CONF = frozenset({
    "spark.executor.memory", "spark.executor.cores", "spark.executor.instances",
    "spark.driver.memory", "spark.driver.cores", "spark.default.parallelism",
    "spark.sql.shuffle.partitions", "spark.hadoop.fs.s3a.endpoint",
    "spark.hadoop.fs.s3a.endpoint.region",
})
REDACTED = "<redacted>"
_USERINFO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/@]*@")





class EnvRef(StrictModel):
    """A storage option read from an environment variable when a run needs it."""

    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")



def _shown(value: Any, public: bool) -> str:
    if isinstance(value, EnvRef):
        return f"${value.env}"  # the variable's name, never its value
    if not public:
        return REDACTED
    return _USERINFO_RE.sub(rf"\1{REDACTED}@", str(value))


def redact_storage_options(options: Mapping[str, Any]) -> dict[str, str]:
    """Storage options safe to show: environment references as `$NAME`, values of
    `PUBLIC_STORAGE_OPTIONS` as written, every other value `<redacted>`."""
    return {k: _shown(v, k.lower() in PUBLIC_STORAGE_OPTIONS) for k, v in options.items()}


def redact_spark_conf(conf: Mapping[str, Any]) -> dict[str, str]:
    """Spark conf safe to show: environment references as `$NAME`, values of
    `PUBLIC_SPARK_CONF` as written, every other value `<redacted>`."""
    return {k: _shown(v, k in PUBLIC_SPARK_CONF) for k, v in conf.items()}


def is_secret_option(key: str) -> bool:
    """Whether an option's name says it may hold a credential (see the module docstring):
    such a key takes only an environment variable reference. Public keys never do."""
    lowered = key.lower()
    if lowered in PUBLIC_STORAGE_OPTIONS or key in PUBLIC_SPARK_CONF:
        return False
    squashed = re.sub(r"[^a-z0-9]", "", lowered)
    if squashed in _NOT_SECRET_OPTIONS:
        return False
    words = set(re.split(r"[^a-z0-9]+", lowered))
    return any(f in squashed for f in _SECRET_FRAGMENTS) or bool(words & _SECRET_WORDS)


class RedactedOptions(dict):
    """A dict of options whose `repr` and `str` show only what `redact` lets through (a
    traceback's locals, a log line with `%r`, a debugger): the values stay usable as a
    plain dict (`==`, `json.dumps`, `**`).

    Args:
        options: The options.
        redact: How they are shown (default `redact_storage_options`).
    """

    def __init__(
        self,
        options: Mapping[str, Any] | None = None,
        redact: Callable[[Mapping[str, Any]], dict[str, str]] | None = None,
    ) -> None:
        super().__init__(options or {})
        self._redact = redact or redact_storage_options

    def __repr__(self) -> str:
        return repr(self._redact(self))

    __str__ = __repr__


def redacted_repr_args(
    args: Iterator[tuple[str | None, Any]], fields: Mapping[str, Callable[[Any], Any]]
) -> Iterator[tuple[str | None, Any]]:
    """A pydantic model's `__repr_args__` with the option fields in `fields` redacted (its
    `repr` and `str`, and so a traceback's or a validation message's view of it)."""
    for name, value in args:
        redact = fields.get(name) if name is not None else None
        yield name, (redact(value) if redact is not None and value is not None else value)


class RedactedReprMixin:
    """For pydantic models with option fields: `redacted_fields` maps a field to how it is
    shown (`redact_storage_options`, `redact_spark_conf`)."""

    redacted_fields: ClassVar[dict[str, Callable[[Any], Any]]] = {}

    def __repr_args__(self) -> Any:
        return redacted_repr_args(super().__repr_args__(), self.redacted_fields)  # type: ignore[misc]


def reject_literal_secrets(options: dict[str, Any]) -> dict[str, Any]:
    """`options` unchanged, or `ValueError` naming the first key that looks like a
    credential (`is_secret_option`) and holds a literal value rather than `{env: NAME}`
    (the message names the key, never the value)."""
    for key, value in options.items():
        if not isinstance(value, EnvRef) and is_secret_option(key):
            raise ValueError(
                f"storage option {key!r} holds a secret: give it as an environment "
                f"variable reference, {key}: {{env: VARIABLE_NAME}}, never literally"
            )
    return options



__all__ = [
    "PUBLIC_SPARK_CONF",
    "PUBLIC_STORAGE_OPTIONS",
    "REDACTED",
    "EnvRef",
    "MissingSecretError",
    "RedactedOptions",
    "RedactedReprMixin",
    "is_secret_option",
    "redacted_repr_args",
    "redact_spark_conf",
    "redact_storage_options",
    "reject_literal_secrets",
]
