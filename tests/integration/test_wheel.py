"""Installing as users install: the built wheel (not the editable repository) in a fresh
virtual environment runs the demo from an unrelated folder, and the demo keeps its contract
(examples, a JSON last line, next commands that work on its run)."""

from __future__ import annotations

import json
import os
import shlex
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args: str | Path, cwd: Path | None = None, env: dict | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A new venv with only the wheel installed; its dependencies come from this
    interpreter's site-packages through a .pth line (no download, and no editable
    install: .pth files of that folder are not processed, so the repository's src/ is
    not importable). Its ~10 s are pip building the wheel and installing it: what a user's
    `pip install` does."""
    tmp = tmp_path_factory.mktemp("wheel")
    # A failed build fails the test (run asserts the exit status): the build tools it needs
    # (setuptools, wheel: pyproject's build-system) come with the dev extra the tests run in.
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp / "dist", REPO)
    wheels = sorted((tmp / "dist").glob("transformer_mt-*.whl"))
    assert len(wheels) == 1, f"expected one transformer_mt wheel, got {[p.name for p in (tmp / 'dist').iterdir()]}"
    wheel = wheels[0]
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if Path(p).is_dir()]
    (Path(purelib) / "dependencies.pth").write_text("".join(p + "\n" for p in deps))
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return env_dir, env


def test_the_wheel_ships_the_presets_and_trains_from_any_folder(wheel_env: tuple[Path, dict], tmp_path: Path) -> None:
    env_dir, env = wheel_env
    python, command = env_dir / "bin" / "python", env_dir / "bin" / "transformer-mt"
    where = run(python, "-c", "import transformer_mt, transformer_mt.common.config as c; "
                "print(transformer_mt.__file__); print(sorted(p.stem for p in c.CONFIG_DIR.glob('*.yaml')))",
                cwd=tmp_path, env=env).stdout.splitlines()
    assert str(env_dir) in where[0] and str(REPO / "src") not in where[0]
    assert {"tiny", "small", "base", "big", "demo"} <= set(eval(where[1]))
    demo = run(command, "demo", "--out", "D", "--train.max_steps=4", "--train.valid_every=4",
               "--data.task_size=200", cwd=tmp_path, env=env)
    lines = demo.stdout.strip().splitlines()
    last = json.loads(lines[-1])
    assert set(last) == {"exact_match", "bleu", "train_seconds", "run_dir"}
    assert 0.0 <= last["exact_match"] <= 1.0 and last["run_dir"] == "D"
    assert demo.stdout.count("    ref ") == 5
    assert (tmp_path / "D" / "config.yaml").is_file() and (tmp_path / "D" / "best.safetensors").is_file()
    commands = [shlex.split(line, comments=True) for line in lines[lines.index("next:") + 1:-1]]
    assert [(Path(words[0]).name, *words[1:]) for words in commands] == [
        ("transformer-mt", "translate", "D"), ("transformer-mt", "serve", "D")]
    translated = run(command, *commands[0][1:], cwd=tmp_path, env=env, stdin="seven\n")
    assert len(translated.stdout.splitlines()) == 1, translated.stderr
