"""model.toml validation: every key known, typed, and errors that name the file, key and closest key."""
import pytest

from kiln import config
from kiln.errors import KilnError


def write(tmp_path, text):
    p = tmp_path / "model.toml"
    p.write_text(text)
    return p


def test_defaults_fill_every_table(tmp_path):
    cfg = config.load(write(tmp_path, ""))
    assert cfg["model"]["source"] == "model.py"
    assert cfg["plan"]["alignment"] == 16 and cfg["plan"]["budget"] == 0
    assert set(cfg) == set(config.config_schema())


def test_unknown_key_suggests_closest(tmp_path):
    with pytest.raises(KilnError) as e:
        config.load(write(tmp_path, "[plan]\nalignement = 8\n"))
    msg = str(e.value)
    assert "model.toml" in msg and "plan.alignement" in msg and "did you mean 'plan.alignment'" in msg
    assert "\n" not in msg


def test_unknown_table_suggests_closest(tmp_path):
    with pytest.raises(KilnError, match="did you mean 'quant'"):
        config.load(write(tmp_path, "[qaunt]\nmode = 'int8'\n"))


def test_wrong_type_is_named(tmp_path):
    with pytest.raises(KilnError, match=r"plan.alignment: expected int, got str"):
        config.load(write(tmp_path, "[plan]\nalignment = 'sixteen'\n"))
    with pytest.raises(KilnError, match="not a power of two from 1 to 4096"):
        config.load(write(tmp_path, "[plan]\nalignment = 12\n"))


def test_invalid_toml_is_one_line(tmp_path):
    with pytest.raises(KilnError, match="invalid TOML"):
        config.load(write(tmp_path, "[plan\n"))


def test_inputs_table(tmp_path):
    cfg = config.load(write(tmp_path, "[inputs.x]\nshape = [1, 3, 8, 8]\n"))
    assert cfg["inputs"] == {"x": {"shape": [1, 3, 8, 8], "dtype": "float32"}}
    with pytest.raises(KilnError, match="did you mean 'shape'"):
        config.load(write(tmp_path, "[inputs.x]\nshap = [1]\n"))


def test_canonical_text_ignores_formatting(tmp_path):
    a = config.load(write(tmp_path, "[plan]\nalignment = 16\nbudget = 0\n"))
    b = config.load(write(tmp_path, "[plan]\nbudget=0   # none\nalignment=16\n"))
    assert config.canonical(config.view(a, ("plan",))) == config.canonical(config.view(b, ("plan",)))
