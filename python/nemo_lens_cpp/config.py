"""NemoLensConfig: the configuration of one process, read from the environment as NeMo Lens and
the C++ library read it (the same variables, prefixes, fallback and parsing rules: the compiled
library does the reading)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import FrozenSet, Optional

from . import _core
from .groups import SpanGroup

ConfigError = _core.ConfigError

_FIELD_TYPES = {
    "enabled": bool, "service_name": str, "export_strategy": str, "export_rank": int,
    "export_sample_rate": float, "sampler_enabled": bool, "traces_enabled": bool,
    "metrics_enabled": bool, "logs_enabled": bool, "span_groups": str, "exporter": str,
    "run_id": str, "user": str, "wandb_entity": str, "wandb_project": str,
}


@dataclass
class NemoLensConfig:
    """Telemetry settings of one process; see docs/configuration.md for every variable.

    ``from_env()`` reads ``<PREFIX>_<KEY>``, then ``<FALLBACK>_<KEY>`` when the first is unset or
    blank. Bad values raise :class:`ConfigError` (a ``ValueError``) naming the variable.
    """

    enabled: bool = False
    service_name: str = "nemo"
    export_strategy: str = "single_rank"
    export_rank: int = -1
    export_sample_rate: float = 1.0
    sampler_enabled: bool = False
    traces_enabled: bool = True
    metrics_enabled: bool = True
    logs_enabled: bool = False
    span_groups: str = "default"
    exporter: str = "otlp"
    run_id: str = ""
    user: str = ""
    wandb_entity: str = ""
    wandb_project: str = ""
    _span_group_cls: Optional[type] = field(default=None, repr=False)
    _env_prefix: str = field(default="NEMO_LENS", repr=False)
    _env_fallback_prefix: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if not (0.0 <= self.export_sample_rate <= 1.0):
            raise ConfigError(
                f"export_sample_rate must be in [0.0, 1.0], got {self.export_sample_rate}"
            )

    @property
    def span_group_cls(self) -> type:
        """The SpanGroup class span_groups resolves against."""
        return self._span_group_cls or SpanGroup

    @property
    def resolved_span_groups(self) -> FrozenSet[str]:
        """:attr:`span_groups` resolved against :attr:`span_group_cls` (raises SpanGroupError)."""
        return self.span_group_cls.resolve(self.span_groups)

    @classmethod
    def from_env(
        cls,
        prefix: str = "NEMO_LENS",
        fallback_prefix: Optional[str] = None,
        span_group_cls: Optional[type] = None,
    ) -> "NemoLensConfig":
        """Reads the configuration from ``<prefix>_*`` (and ``<fallback_prefix>_*``) variables,
        ``OTEL_SERVICE_NAME``, ``OTEL_SDK_DISABLED``, ``WANDB_ENTITY`` and ``WANDB_PROJECT``."""
        if span_group_cls is not None and not (
            isinstance(span_group_cls, type) and issubclass(span_group_cls, SpanGroup)
        ):
            raise TypeError("span_group_cls must be SpanGroup or a subclass of it")
        fields = _core.config_from_env(prefix, fallback_prefix)
        return cls._from_fields(fields, span_group_cls)

    @classmethod
    def _from_fields(cls, fields: dict, span_group_cls: Optional[type] = None) -> "NemoLensConfig":
        env_prefix = fields.pop("env_prefix", "NEMO_LENS")
        env_fallback = fields.pop("env_fallback_prefix", "")
        return cls(**fields, _span_group_cls=span_group_cls, _env_prefix=env_prefix,
                   _env_fallback_prefix=env_fallback)

    def _fields(self) -> dict:
        """The fields as the compiled library takes them; a field of the wrong type raises
        ConfigError naming it."""
        d = {}
        for f in dataclasses.fields(self):
            if f.name.startswith("_"):
                continue
            value = getattr(self, f.name)
            want = _FIELD_TYPES[f.name]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if want is float and isinstance(value, int) and not isinstance(value, bool):
                value, ok = float(value), True
            if not ok:
                raise ConfigError(
                    f"NemoLensConfig.{f.name} must be a {want.__name__}, got {value!r}"
                )
            d[f.name] = value
        d["env_prefix"] = self._env_prefix
        d["env_fallback_prefix"] = self._env_fallback_prefix
        return d
