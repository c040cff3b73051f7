"""entrypoint/: the thin executables the image runs (``train``), first on the image's PATH, each a
few lines that call one function of the package: the same function as the console script of the
same name in container/pyproject.toml (one source of truth for what each command runs)."""

import ast
import os
import re
import shlex
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRYPOINT = os.path.join(ROOT, "entrypoint")
VENV_BIN = "/opt/venv/bin"  # where the sagemaker-training toolkit installs its own `train`
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def entrypoints():
    return sorted(os.listdir(ENTRYPOINT))


def instructions(dockerfile_text):
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in dockerfile_text.splitlines()
                                          if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
            for line in text.splitlines() if line.strip()]


def final_stage(steps):
    """The instructions that shape the final image: its stage and the stages it is built FROM."""
    stages, order, current = {}, [], None
    for instruction, args in steps:
        if instruction == "FROM":
            words = args.split()
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else str(len(order))
            current = stages[name] = {"base": words[0], "steps": []}
            order.append(name)
        elif current is not None:
            current["steps"].append((instruction, args))
    chain, name = [], order[-1]
    while name in stages:
        chain.insert(0, stages[name]["steps"])
        name = stages[name]["base"]
    return [step for steps_of_stage in chain for step in steps_of_stage]


def image_path(steps):
    """The final image's PATH, following every ``ENV PATH=...`` of its stages."""
    path = DEFAULT_PATH
    for instruction, args in steps:
        if instruction == "ENV":
            for assignment in shlex.split(args):
                key, _, value = assignment.partition("=")
                if key == "PATH":
                    path = value.replace("${PATH}", path).replace("$PATH", path)
    return path.split(":")


def copied_to(steps, source):
    return [args.split()[-1].rstrip("/") for instruction, args in steps
            if instruction == "COPY" and args.split()[0].rstrip("/") == source]


def called_function(path):
    """``module:function`` an entrypoint calls; fails unless the file only imports one function
    of the package and calls it (a docstring aside)."""
    tree = ast.parse(open(path).read(), path)
    body = [node for node in tree.body
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    assert len(body) == 2, "%s: expected one import and one call, found %d statements" % (path, len(body))
    imported, call = body
    assert isinstance(imported, ast.ImportFrom) and imported.module.startswith("detector_training"), \
        "%s imports from %s, not the package" % (path, getattr(imported, "module", imported))
    assert len(imported.names) == 1 and imported.names[0].asname is None
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call), "%s: not a call" % path
    assert isinstance(call.value.func, ast.Name) and call.value.func.id == imported.names[0].name
    assert not call.value.args and not call.value.keywords
    return "%s:%s" % (imported.module, imported.names[0].name)


def console_scripts():
    with open(os.path.join(ROOT, "container", "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]["scripts"]


def test_train_is_an_entrypoint():
    assert "train" in entrypoints()


@pytest.mark.parametrize("name", entrypoints())
def test_an_entrypoint_is_executable_and_only_calls_into_the_package(name):
    path = os.path.join(ENTRYPOINT, name)
    assert os.access(path, os.X_OK), "%s is not executable" % path
    assert open(path).readline().startswith("#!/usr/bin/env python3")
    assert called_function(path) == console_scripts()[name], \
        "entrypoint/%s and the console script %s run different functions" % (name, name)


def test_the_dockerfile_copies_entrypoint_first_on_the_path():
    steps = final_stage(instructions(open(os.path.join(ROOT, "Dockerfile")).read()))
    targets = copied_to(steps, "entrypoint")
    assert len(targets) == 1, "the final image should COPY entrypoint/ once: %s" % targets
    path = image_path(steps)
    assert targets[0] in path and VENV_BIN in path, path
    assert path.index(targets[0]) < path.index(VENV_BIN), \
        "%s must come before %s on the image's PATH: %s" % (targets[0], VENV_BIN, path)


def test_the_dockerfile_reading_follows_stages_and_path_order():
    text = ("FROM base AS system\nENV A=1 \\\n    PATH=/opt/venv/bin:${PATH}\n"
            "FROM system AS build\nCOPY entrypoint/ /elsewhere/\n"
            "FROM system AS image\n# COPY entrypoint/ /commented/\nCOPY entrypoint/ /opt/e/\n"
            "ENV PATH=/opt/e:${PATH}\n")
    steps = final_stage(instructions(text))
    assert copied_to(steps, "entrypoint") == ["/opt/e"]
    assert image_path(steps)[:2] == ["/opt/e", "/opt/venv/bin"]
    late = final_stage(instructions(text.replace("ENV PATH=/opt/e:${PATH}", "ENV PATH=${PATH}:/opt/e")))
    assert image_path(late).index("/opt/e") > image_path(late).index("/opt/venv/bin")


def test_an_entrypoint_that_does_more_than_call_is_refused(tmp_path):
    script = tmp_path / "train"
    script.write_text("#!/usr/bin/env python3\nimport os\nfrom detector_training.commands import train\n"
                      "os.environ['X'] = '1'\ntrain()\n")
    with pytest.raises(AssertionError):
        called_function(str(script))
    script.write_text('#!/usr/bin/env python3\n"""doc"""\nfrom detector_training.commands import train\ntrain()\n')
    assert called_function(str(script)) == "detector_training.commands:train"
