"""Secrets in the table registry: storage options and Spark conf values that hold secrets
come only from environment variables (`EnvRef`), and only the values of known public keys
are ever shown (Dagster metadata, logs, errors); every other value is `<redacted>`.

No dagster import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from delta_ops.defs.policy import StrictModel
from delta_ops.errors import MissingSecretError

#: Storage option names that hold secrets: they may only come from environment variables.
_SECRET_OPTION_RE = re.compile(
    r"(^|_)(key|secret|token|password|passwd|credentials?|sas|signature)($|_)", re.IGNORECASE
)
#: Option names that contain "key" but hold no secret.
_NOT_SECRET_OPTIONS = frozenset({"key_prefix", "sse_kms_key_id", "kms_key_id"})

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
    """Whether a storage option name holds a secret (key, secret, token, password...)."""
    return key.lower() not in _NOT_SECRET_OPTIONS and bool(_SECRET_OPTION_RE.search(key))



__all__ = [
    "PUBLIC_SPARK_CONF",
    "PUBLIC_STORAGE_OPTIONS",
    "REDACTED",
    "EnvRef",
    "MissingSecretError",
    "is_secret_option",
    "redact_spark_conf",
    "redact_storage_options",
]
