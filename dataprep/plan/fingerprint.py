"""How two fingerprints (the options that shape a run's bytes) differ, told in the flags the user typed.

A fingerprint is built by the command (``dataprep.commands.config.ShardConfig.fingerprint``) and
recorded in the plan and the manifest; a resume or a rerun with other options is refused with
``option_differences`` naming what changed.
"""

from __future__ import annotations

from typing import Any

from dataprep.formats.sizes import format_bytes

# The command-line flag that sets each key of the fingerprint ("group.field" for
# nested options): messages about options name what the user typed, not our field names.
OPTION_FLAGS: dict[str, str] = {
    "raw": "RAW", "layout": "--layout", "format": "--format", "max_shard_bytes": "--shard-size",
    "max_samples_per_shard": "--samples-per-shard", "row_group_bytes": "--row-group-size",
    "range_bytes": "--range-size", "prefix": "--prefix", "seed": "--seed", "shuffle": "--no-shuffle",
    "max_record_bytes": "--max-record-bytes",
    "follow_symlinks": "--follow-symlinks", "image.min_side": "--min-side", "image.max_pixels": "--max-pixels",
    "image.resize_short": "--resize-short", "image.max_side": "--max-side", "image.quality": "--quality",
    "image.reencode_format": "--reencode-format", "table.schema": "--schema", "table.required": "--required",
    "table.dedup_on": "--dedup-on", "text.unit": "--text-unit", "tokens.tokenizer": "--tokenizer",
    "tokens.eos": "--eos", "tokens.min_tokens": "--min-tokens", "tokens.text_column": "--text-column",
}
_SWITCHES = {"shuffle": False, "follow_symlinks": True}  # key -> the value that the flag sets
_GROUPS = ("image", "table", "text", "tokens")
_MAX_SHOWN = 5


def _flatten(options: dict[str, Any]) -> dict[str, Any]:
    """Fingerprint -> {"seed": 0, "image.quality": 95, ...} (option groups one level down)."""
    flat: dict[str, Any] = {}
    for key, value in options.items():
        if key in _GROUPS and isinstance(value, dict):
            flat.update({f"{key}.{name}": v for name, v in value.items()})
        else:
            flat[key] = value
    return flat


def describe_option(key: str, value: Any) -> str:
    """How the user would have typed fingerprint option ``key`` set to ``value``: ``--shard-size 3.0 KiB``."""
    flag = OPTION_FLAGS.get(key, key)
    if key == "tokens.tokenizer" and isinstance(value, dict):
        return f"{flag} {value.get('path')} (sha256 {str(value.get('sha256'))[:16]}...)"
    if key == "range_bytes" and value is None:
        return f"{flag} auto"
    if key in _SWITCHES:
        return f"with {flag}" if value == _SWITCHES[key] else f"without {flag}"
    if value is None or value == [] or value == ():
        return f"without {flag}"
    if key.endswith("_bytes"):
        return f"{flag} {format_bytes(value)}"
    if isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))
    return f"{flag} {value}"


def option_differences(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The options that differ between two fingerprints, as flags: ``--seed 0 before, --seed 7 now; ...``."""
    a, b = _flatten(old), _flatten(new)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    shown = [f"{describe_option(k, a.get(k))} before, {describe_option(k, b.get(k))} now" for k in keys[:_MAX_SHOWN]]
    return "; ".join(shown) + (" ..." if len(keys) > _MAX_SHOWN else "")

