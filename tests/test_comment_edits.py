"""A model.py's comments are not part of the import stage's signature (`kiln.stages.python_tokens`); the build
skips import for a comment edit (the mutation matrix), which is sound only because import's output is the same."""
from __future__ import annotations

import shutil
from pathlib import Path

from conftest import ROOT
from scons_matrix import TORCH_MODEL, _comment_edits
from kiln import config as model_config
from kiln.runner import run_stage
from kiln.stages import python_tokens

SOURCE = b'"""Docs."""\nimport torch\n\n\ndef f(x):\n    return x + 1\n'


def test_comments_blank_lines_and_spacing_do_not_count():
    edited = (b'# -*- coding: utf-8 -*-\n"""Docs."""\nimport torch  # why\n\n# a line\n\n\ndef f( x ):\n'
              b'    # inside\n    return x+1  # trailing\n')
    assert python_tokens(edited) == python_tokens(SOURCE)


def test_docstrings_code_strings_and_the_encoding_count():
    for edited in (SOURCE.replace(b"Docs.", b"Other docs."), SOURCE.replace(b"x + 1", b"x + 2"),
                   SOURCE + b'\nNAME = "# not a comment"\n',
                   b"# -*- coding: latin-1 -*-\n" + SOURCE, SOURCE.replace(b"    return", b"\treturn")):
        assert python_tokens(edited) != python_tokens(SOURCE), edited


def test_a_file_that_does_not_tokenize_is_taken_by_its_bytes():
    broken = b"def f(:\n    return (\n"
    assert python_tokens(broken) == b"bytes\0" + broken
    assert python_tokens(broken + b"# more\n") != python_tokens(broken)


def test_import_of_a_comment_edited_model_py_gives_the_same_bytes(tmp_path: Path):
    """The edit of the matrix's `model.py:comment` row (every line number moves): a fresh import writes what the
    skipped one had written."""
    outputs = []
    for variant in ("original", "commented"):
        repo = tmp_path / variant
        shutil.copytree(ROOT / "models" / TORCH_MODEL, repo / "models" / TORCH_MODEL)
        if variant == "commented":
            _comment_edits(repo)
        folder, build = repo / "models" / TORCH_MODEL, repo / "build" / TORCH_MODEL
        build.mkdir(parents=True)
        run_stage("import", TORCH_MODEL, folder, model_config.load(folder / "model.toml"), build)
        outputs.append({name: (build / name).read_bytes() for name in ("imported.kir", "calibration.npz")})
    assert outputs[0] == outputs[1]
