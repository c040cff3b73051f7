"""buildspec.yml: valid CodeBuild syntax, every command it names exists in the repository, and it
builds the images exactly as our CI does (the same make targets, the one Dockerfile)."""

import os
import re
import shlex

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load():
    with open(os.path.join(ROOT, "buildspec.yml")) as handle:
        return yaml.safe_load(handle)


def make_targets():
    targets = set()
    with open(os.path.join(ROOT, "Makefile")) as handle:
        for line in handle:
            match = re.match(r"^([A-Za-z0-9_.-]+):(?!=)", line)
            if match:
                targets.add(match.group(1))
    return targets


def recipe(target):
    """The shell lines of a Makefile target."""
    lines, inside = [], False
    with open(os.path.join(ROOT, "Makefile")) as handle:
        for line in handle:
            if re.match(r"^%s:(?!=)" % re.escape(target), line):
                inside = True
            elif inside and line.startswith("\t"):
                lines.append(line.strip())
            elif inside:
                break
    return lines


def commands(spec):
    for phase in spec["phases"].values():
        for command in phase.get("commands", []):
            yield command


def test_codebuild_syntax():
    spec = load()
    assert str(spec["version"]) == "0.2"
    assert set(spec["phases"]) <= {"install", "pre_build", "build", "post_build"}
    for name, phase in spec["phases"].items():
        assert isinstance(phase.get("commands"), list) and phase["commands"], name
        assert all(isinstance(c, str) and c.strip() for c in phase["commands"])
    assert all(isinstance(v, str) for v in spec["env"]["variables"].values())


def test_every_command_it_names_exists():
    targets = make_targets()
    tools = {"aws", "docker", "export", "test"}
    for command in commands(load()):
        for part in command.split("|"):
            words = shlex.split(part.strip())
            head = words[0]
            if head == "make":
                named = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
                assert named and all(t in targets for t in named), command
            elif head.startswith((".venv/", ".venv-sdk/")) or head.startswith("bash"):
                path = words[1] if head == "bash" else head
                assert path.startswith((".venv/", ".venv-sdk/")) or os.path.exists(os.path.join(ROOT, path)), command
                for word in words[1:]:
                    if word.startswith(("tests", "sagemaker_launch")) and "=" not in word:
                        assert os.path.exists(os.path.join(ROOT, word)), command
                    if word.startswith("--ignore="):
                        assert os.path.exists(os.path.join(ROOT, word.split("=", 1)[1])), command
            else:
                assert head in tools, command


def test_it_builds_both_variants_smoke_tests_and_pushes_the_gpu_image_by_commit():
    spec = load()
    text = "\n".join(commands(spec))
    assert "make image-gpu" in text and "make image " in text and "make smoke" in text
    # A failed test aborts the build: post_build (the push) would otherwise still run.
    assert spec["phases"]["build"].get("on-failure") == "ABORT"
    assert spec["phases"]["pre_build"].get("on-failure") == "ABORT"
    assert re.search(r"docker push \$\{ECR_REGISTRY\}/\$\{ECR_REPOSITORY\}:\$\{IMAGE_TAG\}", text)
    assert "CODEBUILD_RESOLVED_SOURCE_VERSION" in text
    assert not re.search(r"\d{12}\.dkr\.ecr", text)  # no account baked in
    assert "AWS_SECRET" not in open(os.path.join(ROOT, "buildspec.yml")).read()


def test_both_images_come_from_the_one_dockerfile_on_debian_bookworm():
    spec = load()
    assert spec["env"]["variables"]["BASE_IMAGE"] == "debian:bookworm"
    text = "\n".join(commands(spec))
    assert re.search(r"make image-gpu .*BASE_IMAGE=\$\{BASE_IMAGE\}", text)
    assert re.search(r"make image .*BASE_IMAGE=\$\{BASE_IMAGE\}", text)
    builds = {}
    for target in ("image", "image-gpu"):
        lines = [l for l in recipe(target) if l.startswith("docker build")]
        assert len(lines) == 1, target
        words = shlex.split(lines[0])
        assert "-f" not in words and "--file" not in words and words[-1] == ".", lines[0]
        assert "BASE_IMAGE=$(BASE_IMAGE)" in words, lines[0]
        builds[target] = words
    assert "VARIANT=cpu" in builds["image"] and "VARIANT=gpu" in builds["image-gpu"]
    # The two builds differ only in the tag and the variant.
    strip = lambda words: [w for w in words if w not in ("$(IMAGE)", "$(GPU_IMAGE)") and "VARIANT=" not in w]
    assert strip(builds["image"]) == strip(builds["image-gpu"])
    dockerfile = open(os.path.join(ROOT, "Dockerfile")).read()
    assert re.search(r"^ARG BASE_IMAGE=debian:bookworm$", dockerfile, re.M)
    assert re.search(r"^ARG VARIANT=gpu$", dockerfile, re.M)  # a plain `docker build .` is the GPU image
    for gone in ("nvidia/cuda", "ppa:", "add-apt-repository", "docker/wheels"):
        assert gone not in dockerfile, gone


def test_no_image_build_takes_a_wheel_from_outside_the_build():
    # Horovod is compiled inside the build for the variant being built: the GPU image can never
    # pick up the CPU wheel the local install made.
    for target in ("image", "image-gpu", "base-image", "pretrained"):
        assert not any("whl" in line or "WHEELHOUSE" in line for line in recipe(target)), target


def test_the_built_images_are_tested_before_the_push():
    """Container, serving and GPU-image tests against the images just built, the launcher's
    local-mode tests in the SDK environment, all before the push; CI=true so none of them skips."""
    spec = load()
    assert list(spec["phases"]) == ["install", "pre_build", "build", "post_build"]
    assert spec["env"]["variables"]["CI"] == "true"
    assert "make sdk-venv" in spec["phases"]["install"]["commands"]
    for name in ("install", "pre_build", "build", "post_build"):
        assert spec["phases"][name].get("on-failure") == "ABORT", name
    build = spec["phases"]["build"]["commands"]
    builds = [i for i, c in enumerate(build) if c.startswith(("make image ", "make image-gpu "))]
    image_tests = build.index(".venv/bin/python -m pytest -q tests/image")
    sdk_tests = build.index(".venv-sdk/bin/python -m pytest -q sagemaker_launch/tests")
    assert len(builds) == 2 and max(builds) < min(image_tests, sdk_tests)
    # The whole folder, nothing left out of it: the serving, container and GPU-image tests.
    for module in ("test_serve_image.py", "test_container.py", "test_gpu_image.py"):
        assert os.path.isfile(os.path.join(ROOT, "tests", "image", module)), module
    for command in (build[image_tests], build[sdk_tests]):
        options = shlex.split(command.split(" pytest ", 1)[1])
        assert not [o for o in options if o.startswith(("-k", "-m", "--ignore", "--deselect")) or "::" in o], command
    # The push comes last, and only while the build is succeeding.
    post = spec["phases"]["post_build"]["commands"]
    assert post[0] == 'test "${CODEBUILD_BUILD_SUCCEEDING}" = 1'
    assert [i for i, c in enumerate(post) if c.startswith("docker push")] == [len(post) - 1]
