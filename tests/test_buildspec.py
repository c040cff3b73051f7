"""buildspec.yml: valid CodeBuild syntax, and every command it names exists in the repository."""

import os
import re
import shlex

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    tools = {"aws", "docker", "export"}
    for command in commands(load()):
        for part in command.split("|"):
            words = shlex.split(part.strip())
            head = words[0]
            if head == "make":
                named = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
                assert named and all(t in targets for t in named), command
            elif head.startswith(".venv/") or head.startswith("bash"):
                path = words[1] if head == "bash" else head
                assert path.startswith(".venv/") or os.path.exists(os.path.join(ROOT, path)), command
                for word in words[1:]:
                    if word.startswith("tests") and "=" not in word:
                        assert os.path.exists(os.path.join(ROOT, word)), command
                    if word.startswith("--ignore="):
                        assert os.path.exists(os.path.join(ROOT, word.split("=", 1)[1])), command
            else:
                assert head in tools, command


def test_it_builds_both_variants_smoke_tests_and_pushes_the_gpu_image_by_commit():
    text = "\n".join(commands(load()))
    assert "make image-gpu" in text and "make image " in text and "make smoke" in text
    assert re.search(r"docker push \$\{ECR_REGISTRY\}/\$\{ECR_REPOSITORY\}:\$\{IMAGE_TAG\}", text)
    assert "CODEBUILD_RESOLVED_SOURCE_VERSION" in text
    assert not re.search(r"\d{12}\.dkr\.ecr", text)  # no account baked in
    assert "AWS_SECRET" not in open(os.path.join(ROOT, "buildspec.yml")).read()
