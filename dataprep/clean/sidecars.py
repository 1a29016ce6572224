"""The sidecar files of a media sample (``.json``, ``.txt``, ``.cls``...): read, checked, and the ``.json``
dataprep writes when a sample has none."""

from __future__ import annotations

import json
import unicodedata

from dataprep.inputs.records import RawRecord, RejectReason


class RejectedInput(Exception):
    """Carries a reject reason out of nested helpers of the image cleaning; never escapes ``dataprep.clean``."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def read_field(path: str, field: str) -> bytes:
    """The bytes of a sample's ``field`` file at ``path``; ``unreadable`` when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        detail = f"cannot read {field} file {path}: {err.strerror or err}"
        raise RejectedInput(RejectReason.UNREADABLE, detail) from None


def read_sidecars(files: dict[str, str]) -> tuple[dict[str, bytes], dict[str, object] | None]:
    """Sidecar fields -> bytes ("txt" NFC-normalised, "json" consumed), and the parsed user JSON object."""
    out: dict[str, bytes] = {}
    user_json: dict[str, object] | None = None
    for field in sorted(files):
        data = read_field(files[field], field)
        if field == "txt":
            out[field] = unicodedata.normalize("NFC", _utf8(data, field, files[field])).encode("utf-8")
        elif field == "json":
            user_json = _parse_json_object(data, files[field])
        else:
            out[field] = data
    return out, user_json


def _utf8(data: bytes, field: str, path: str) -> str:
    try:
        return data.decode("utf-8-sig")  # a leading BOM is not part of the text
    except UnicodeDecodeError as err:
        detail = f"{field} sidecar {path} is not UTF-8: {err.reason} at byte {err.start}"
        raise RejectedInput(RejectReason.BAD_METADATA, detail) from None


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _parse_json_object(data: bytes, path: str) -> dict[str, object]:
    text = _utf8(data, "json", path)
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except ValueError as err:  # JSONDecodeError is a ValueError
        raise RejectedInput(RejectReason.BAD_METADATA, f"json sidecar {path} does not parse: {err}") from None
    if not isinstance(doc, dict):
        raise RejectedInput(RejectReason.BAD_METADATA,
                        f"json sidecar {path} holds a JSON {type(doc).__name__}, not an object")
    return doc


def default_json(raw: RawRecord, width: int, height: int) -> dict[str, object]:
    doc: dict[str, object] = {"width": width, "height": height}
    if raw.label is not None:
        doc["label"] = raw.label
    return doc


def dump_json(doc: dict[str, object]) -> bytes:
    text = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (undecodable file names kept with surrogateescape, or "\udcxx"
        # escapes in a user's JSON) have no UTF-8 form: escape them, still valid JSON.
        return json.dumps(doc, sort_keys=True, ensure_ascii=True, separators=(",", ":"),
                          allow_nan=False).encode("ascii")
