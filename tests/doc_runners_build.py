"""Runners of the documented scripts, SCons builds, caches and the external repository (tests/doc_commands.py)."""
from __future__ import annotations

import base64
import re
import shlex
import shutil

import external_repo
from cache_servers import nginx
from conftest import ROOT
from doc_commands import STAGE_NAMES, Command, Docs, Result, model_stages, runs, stage_actions
from scons_matrix import ONNX_MODEL, set_key

# -- README: quick start --------------------------------------------------------------------------
@runs(r"\./scripts/run\.sh")
def run_script(docs: Docs, cmds: list[Command]) -> None:
    """For real on a small project: onnx_cnn alone, nothing built."""
    repo = docs.sources()
    shutil.rmtree(repo / "models/tiny_cnn")
    result = docs.run(cmds[0].shell(), repo)
    assert model_stages(ONNX_MODEL) <= result.actions and not any("tiny_cnn" in a for a in result.actions), result.log
    assert re.search(rf"^{ONNX_MODEL} +bit-exact \(10/10\)", result.stdout, re.M), result.log


@runs(r"\./scripts/test\.sh \[ARGS\.\.\.\]")
def suite_script(docs: Docs, cmds: list[Command]) -> None:
    """What CI runs, on one small test file (its arguments go to pytest)."""
    assert (ROOT / ".ci/run").read_text().splitlines()[-1] == f"exec {cmds[0].shell()}"
    result = docs.run(cmds[0].shell(keep={"ARGS...": "tests/test_config.py"}), docs.project())
    assert re.search(r"^\d+ passed in ", result.stdout, re.M) and "failed" not in result.stdout, result.log


# -- README and docs/build.md: the SCons build ----------------------------------------------------------
@runs(r"scons", r"scons -j2")
def build_everything(docs: Docs, cmds: list[Command]) -> None:
    """A model whose build is gone: its stages run and its program is linked again (the firmware, linked from
    objects of the same bytes, is up to date)."""
    for cmd in cmds:
        repo = docs.project(cmd.text.replace(" ", ""))
        shutil.rmtree(repo / "build/host" / ONNX_MODEL)
        actions = docs.run(cmd.shell(), repo).actions
        assert stage_actions(actions) == model_stages(ONNX_MODEL), actions
        assert f"link build/host/{ONNX_MODEL}/{ONNX_MODEL}" in actions and (repo / "build/host/firmware").is_file(), actions


@runs(r"scons (kws|tiny_cnn)(-quantize)?")
def build_one_model(docs: Docs, cmds: list[Command]) -> None:
    """A model up to one stage, then its whole chain. `kws` is the model `kiln new kws` starts (here the zoo's DS-CNN
    as ONNX), built from nothing; of the built tiny_cnn, the stage's artifact is gone, and only that stage runs."""
    repo = docs.project()
    shutil.copytree(ROOT / "models/kws_dscnn_onnx", repo / "models/kws")
    for cmd in sorted(cmds, key=lambda c: not c.text.endswith("-quantize")):
        model, _, stage = cmd.text.split()[1].partition("-")
        if model == "kws":
            want = model_stages(model, STAGE_NAMES[:3] if stage else STAGE_NAMES[3:])
        else:
            (repo / "build/host/tiny_cnn" / ("quantized.kir" if stage else "planned.kir")).unlink()
            want = {f"kiln {stage or 'plan'} tiny_cnn"}
        actions = docs.run(cmd.shell(), repo).actions
        assert stage_actions(actions) == want, actions
        assert "link build/host/firmware" not in actions and (stage or model != "kws" or "link build/host/kws/kws" in actions)


@runs(r"scons -h")
def build_help(docs: Docs, cmds: list[Command]) -> None:
    text = docs.run(cmds[0].shell(), docs.project()).stdout
    assert re.search(r"^Kiln models \(build/host\): onnx_cnn, tiny_cnn$", text, re.M), text
    assert "MODEL-STAGE" in text and "target=cortex-m4" in text


@runs(r"scons --debug=explain")
def build_explained(docs: Docs, cmds: list[Command]) -> None:
    """As docs/build.md's sample: a changed plan table reruns plan, and scons says why."""
    repo = docs.project()
    set_key(repo / "models" / ONNX_MODEL / "model.toml", "plan", "alignment", 64)
    log = docs.run(cmds[0].shell(), repo).log
    assert f"scons: rebuilding `build/host/{ONNX_MODEL}/planned.kir' because:" in log, log
    assert re.search(r'`\{"plan":\{"alignment":64,.*\}\}\' is a new dependency', log), log


@runs(r"scons report", r"kiln build-report build/host -o r\.html")
def build_report(docs: Docs, cmds: list[Command]) -> None:
    """`scons report` and `kiln build-report` write the same page, of every model."""
    repo = docs.project()
    pages = []
    for cmd in cmds:
        docs.run(cmd.shell(), repo)
        pages.append((repo / ("r.html" if cmd.text.startswith("kiln") else "build/host/report.html")).read_text())
    assert 'data-model="tiny_cnn"' in pages[0] and f'data-model="{ONNX_MODEL}"' in pages[0] and pages[0] == pages[1]


def cache_summary(log: str, where: str) -> tuple[int, int, int, int, str]:
    """(hits, misses, refused, stored, rest) of the build's summary line for the cache at `where`."""
    line = re.search(rf"^kiln: cache {re.escape(where)}: (\d+) hits, (\d+) misses, (\d+) entries refused, (\d+) stored(.*)$", log, re.M)
    assert line, log
    return int(line[1]), int(line[2]), int(line[3]), int(line[4]), line[5]


@runs(r"scons --kiln-cache=DIR", r"scons --kiln-cache=DIR --kiln-cache-readonly", r"KILN_CACHE_HMAC_KEY=\.\.\. scons --kiln-cache=DIR")
def cache_folder(docs: Docs, cmds: list[Command]) -> None:
    """Each run rebuilds onnx_cnn's folder: the first fills the cache, a read-only run takes every stage from it,
    a signing run finds no signed entry (its stages run and it stores signed ones), and then takes them."""
    repo, cache = docs.project(), docs.tmp / "cache"
    by_text = {c.text: c for c in cmds}

    def build(cmd: Command) -> Result:
        shutil.rmtree(repo / "build/host" / ONNX_MODEL)
        secret = {"KILN_CACHE_HMAC_KEY=...": "KILN_CACHE_HMAC_KEY=" + "0123abcd" * 4} if "HMAC" in cmd.text else {}
        return docs.run(cmd.shell(replace={"DIR": shlex.quote(str(cache)), **secret}), repo)

    first = build(by_text["scons --kiln-cache=DIR"])
    assert stage_actions(first.actions) == model_stages(ONNX_MODEL) and cache_summary(first.log, str(cache))[3] > 0
    readonly = build(by_text["scons --kiln-cache=DIR --kiln-cache-readonly"])
    assert stage_actions(readonly.actions) == set() and cache_summary(readonly.log, str(cache))[3:] == (0, " (read-only)")
    signing = by_text["KILN_CACHE_HMAC_KEY=... scons --kiln-cache=DIR"]
    assert stage_actions(build(signing).actions) == model_stages(ONNX_MODEL)
    assert stage_actions(build(signing).actions) == set()


@runs(r"scons --kiln-cache=https://cache\.example\.com/kiln", r"scons --kiln-cache=http://cache:8080/kiln",
      r"KILN_CACHE_TOKEN=\.\.\. scons --kiln-cache=https://\.\.\.", r"KILN_CACHE_USER=ci KILN_CACHE_PASSWORD=\.\.\. scons --kiln-cache=https://\.\.\.")
def cache_server(docs: Docs, cmds: list[Command]) -> None:
    """Against nginx with WebDAV on 127.0.0.1 (HTTPS with a certificate of its own, trusted through SSL_CERT_FILE),
    all serving one folder: the first build fills it, every later one (plain HTTP, a bearer token, basic auth,
    each required by its server) takes every stage from it."""
    repo, root = docs.project(), docs.tmp / "served"
    root.mkdir()
    token, password = "a-ci-token-0123456789", "a-ci-password"
    basic = base64.b64encode(f"ci:{password}".encode()).decode()
    for i, cmd in enumerate(cmds):
        auth = f"Bearer {token}" if "TOKEN" in cmd.text else f"Basic {basic}" if "USER" in cmd.text else None
        tls = "https://" in cmd.text
        with nginx(docs.tmp / f"nginx{i}", root=root, auth=auth, tls=tls) as url:
            secrets = {"KILN_CACHE_TOKEN=...": f"KILN_CACHE_TOKEN={token}", "KILN_CACHE_PASSWORD=...": f"KILN_CACHE_PASSWORD={password}"}
            text = cmd.shell(replace={re.search(r"--kiln-cache=(\S+)", cmd.text)[1]: f"{url}/kiln",
                                      **{k: v for k, v in secrets.items() if k in cmd.text}})
            shutil.rmtree(repo / "build/host" / ONNX_MODEL)
            result = docs.run(text, repo, env={"SSL_CERT_FILE": str(docs.tmp / f"nginx{i}/cert.pem")} if tls else None)
        hits, misses, refused, stored, _ = cache_summary(result.log, f"{url}/kiln")
        assert refused == 0 and token not in result.log and password not in result.log
        if i == 0:
            assert stage_actions(result.actions) == model_stages(ONNX_MODEL) and stored > 0, result.log
        else:
            assert stage_actions(result.actions) == set() and misses == stored == 0 and hits > 0, result.log


# -- docs/build.md: a firmware repository -----------------------------------------------------------
@runs(r"cd examples/external_repo", r"\./build/host/gesture_app", r"kiln qemu build/m4/gesture_app\.elf", r"kiln check build/m4")
def external_repo_block(docs: Docs, cmds: list[Command]) -> None:
    """The page's block runs in order in its own example (tests/external_repo.py takes it and the SConstruct the page
    shows from docs/build.md, which is the example's): both apps print the reference's scores, both roots check
    bit-exact, the report has the Cortex-M4 layers. Its `scons -j2`, `kiln check build/host` and `scons report` are
    run here too, in that order, in that folder."""
    repo, results = docs.fixture("external_repo_run")
    assert [c.text for c in cmds] == [c for c in external_repo.doc_commands() if c in {c.text for c in cmds}]
    assert external_repo.doc_sconstruct() == (ROOT / "examples/external_repo/SConstruct").read_text()
    external_repo.check_documented_run(repo, results)
