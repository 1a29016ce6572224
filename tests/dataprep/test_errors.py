"""The package's one validator module, and the configuration that uses it: messages name the argument, what it
must be, and what it got."""

from __future__ import annotations

import enum
from pathlib import Path

import pytest

from dataprep.commands.config import Engine, ShardConfig
from dataprep.errors import UsageError
from dataprep.errors import as_enum, require_bool, require_int, is_int


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@pytest.mark.parametrize(("kwargs", "value", "message"), [
    ({"minimum": 1}, 0, "'n' must be a positive int (got 0 that is a int)"),
    ({"minimum": 1}, True, "'n' must be a positive int (got True that is a bool)"),
    ({"minimum": 0}, -1, "'n' must be a non-negative int (got -1 that is a int)"),
    ({"minimum": 2}, 1, "'n' must be an int >= 2 (got 1 that is a int)"),
    ({"minimum": 1, "maximum": 100}, 101, "'n' must be an int within 1..100 (got 101 that is a int)"),
    ({"minimum": 1, "optional": True}, 2.5, "'n' must be a positive int or None (got 2.5 that is a float)"),
    ({"minimum": 1, "expected": "a count"}, "3", "'n' must be a count (got '3' that is a str)"),
])
def test_check_int_names_the_argument_the_rule_and_the_value(kwargs, value, message):
    with pytest.raises(UsageError) as caught:
        require_int("n", value, error=UsageError, **kwargs)
    assert str(caught.value) == message


def test_check_int_accepts_ints_in_range_and_none_when_optional():
    require_int("n", 1, minimum=1, error=ValueError)
    require_int("n", 100, minimum=1, maximum=100, error=ValueError)
    require_int("n", None, minimum=1, optional=True, error=ValueError)
    with pytest.raises(ValueError, match="'n' must be a positive int"):
        require_int("n", None, minimum=1, error=ValueError)
    assert is_int(3) and not is_int(True) and not is_int(3.0)


def test_check_bool_and_as_enum():
    require_bool("flag", False, error=UsageError)
    with pytest.raises(UsageError, match=r"'flag' must be a bool \(got 1 that is a int\)"):
        require_bool("flag", 1, error=UsageError)
    assert as_enum("colour", Colour, "blue", error=UsageError) is Colour.BLUE
    assert as_enum("colour", Colour, Colour.RED, error=UsageError) is Colour.RED
    with pytest.raises(TypeError, match=r"'colour' must be one of 'red', 'blue' \(got 'green' that is a str\)"):
        as_enum("colour", Colour, "green", error=TypeError)


def test_shard_config_coerces_paths_and_choices_once(tmp_path):
    config = ShardConfig(raw=str(tmp_path / "raw"), out=str(tmp_path / "out"), engine="ray")
    assert config.raw == tmp_path / "raw" and isinstance(config.raw, Path) and isinstance(config.out, Path)
    assert config.engine is Engine.RAY
    with pytest.raises(UsageError, match=r"'engine' must be one of 'local', 'ray' \(got 'spark' that is a str\)"):
        ShardConfig(raw=tmp_path, out=tmp_path / "out", engine="spark")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"workers": 0}, "'workers' must be a positive int (got 0 that is a int)"),
    ({"range_bytes": True}, "'range_bytes' must be a positive int or None (got True that is a bool)"),
    ({"max_shard_bytes": -1}, "'max_shard_bytes' must be a positive int (got -1 that is a int)"),
    ({"prefix": "a/b"}, "'prefix' must be a plain file-name prefix (got 'a/b' that is a str)"),
])
def test_shard_config_refuses_bad_options_naming_them(tmp_path, kwargs, message):
    with pytest.raises(UsageError) as caught:
        ShardConfig(raw=tmp_path, out=tmp_path / "out", **kwargs)
    assert str(caught.value) == message
