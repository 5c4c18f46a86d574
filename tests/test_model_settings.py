"""Each model kind's settings are typed and defaulted once, in its module's frozen dataclass
(icl.models.<kind>.Settings); the schema's per-kind properties and defaults must say the same,
so a setting added, renamed or re-defaulted on one side alone fails here."""
import dataclasses

import pytest

from icl.config import config_schema
from icl.models import MODELS

COMMON = {"name", "kind", "optimizer", "lr"}          # every kind's, checked by the schema alone
TYPES = {"integer": int, "number": float, "boolean": bool}


def schema_settings() -> dict[str, dict]:
    """kind -> {setting: its schema property}, from the model's if/then branches."""
    out = {}
    for branch in config_schema()["$defs"]["model"]["allOf"]:
        kind = branch["if"]["properties"]["kind"]["const"]
        out[kind] = {k: v for k, v in branch["then"]["properties"].items() if k not in COMMON}
    return out


def test_every_kind_has_a_schema_branch():
    assert set(schema_settings()) == set(MODELS)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_schema_matches_the_settings_dataclass(kind):
    cls, props = MODELS[kind], schema_settings()[kind]
    fields = {f.name: f for f in dataclasses.fields(cls.Settings)}
    assert cls.Settings.__dataclass_params__.frozen
    assert set(props) == set(fields), f"{kind}: schema {sorted(props)} vs {cls.Settings.__name__} {sorted(fields)}"
    assert set(cls.Settings.unfilled) <= set(fields)
    assert set(cls.column_types) <= set(fields)
    for name, prop in props.items():
        default = fields[name].default
        if name in cls.Settings.unfilled:
            assert "default" not in prop, f"{kind}.{name}: the schema fills a default the dataclass says it leaves out"
        else:
            assert prop.get("default", dataclasses.MISSING) == default, f"{kind}.{name}: schema {prop.get('default')!r} vs {default!r}"
        if "enum" in prop:
            assert default in prop["enum"], (kind, name)
        elif default is not None:
            assert type(default) is TYPES[prop["type"]], (kind, name, prop["type"])


def test_settings_fill_missing_and_null_values():
    from icl.models.gpt import GPTSettings
    assert MODELS["gpt"].settings({"name": "g", "kind": "gpt", "layers": 2, "heads": None}) == GPTSettings(layers=2)
    assert MODELS["lsa"].settings({}).rank is None and MODELS["lsa"].settings({}).heads == 1
