import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The container tier's gate, the one tests/ uses (loaded by path: tests/ is not a package).
_spec = importlib.util.spec_from_file_location("docker_engine", os.path.join(ROOT, "tests", "docker_engine.py"))
docker_engine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docker_engine)


def pytest_runtest_setup(item):
    # Tests marked docker_engine skip without an engine, or under CI=true fail naming it.
    docker_engine.require_engine(item)


@pytest.fixture(autouse=True)
def offline_sdk(tmp_path, monkeypatch):
    """Dummy credentials and region, telemetry off (the SDK reads ~/.config/sagemaker/config.yaml)."""
    home = tmp_path / "home"
    (home / ".config" / "sagemaker").mkdir(parents=True)
    (home / ".config" / "sagemaker" / "config.yaml").write_text(
        'SchemaVersion: "1.0"\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    yield home
