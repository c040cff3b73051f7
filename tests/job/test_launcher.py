import pytest

from detector_training.errors import ConfigError
from detector_training.job.launcher import LaunchPlan, forwarded_env_names, make_plan, mpirun_command, processes_per_host
from detector_training.job.sm_env import Environment, JobPaths


def test_processes_per_host_follows_gpus_unless_overridden():
    assert processes_per_host(None, 8) == 8
    assert processes_per_host(None, 0) == 1
    assert processes_per_host("2", 0) == 2
    assert processes_per_host("\"4\"", 8) == 4
    with pytest.raises(ConfigError):
        processes_per_host("0", 0)
    with pytest.raises(ConfigError):
        processes_per_host("two", 0)


def test_plan_from_resource_config():
    env = Environment(paths=JobPaths("/x"), hyperparameters={},
                      resource_config={"current_host": "algo-2", "hosts": ["algo-2", "algo-1"],
                                       "network_interface_name": "ethwe"})
    plan = make_plan(env, 4)
    assert plan.hosts == ("algo-1", "algo-2") and plan.leader == "algo-1" and not plan.is_leader
    assert plan.world_size == 8 and plan.network_interface == "ethwe"


def test_current_host_must_be_listed():
    env = Environment(paths=JobPaths("/x"), resource_config={"current_host": "algo-3", "hosts": ["algo-1"]})
    with pytest.raises(ConfigError):
        make_plan(env, 1)


def test_mpirun_command_for_two_hosts_has_the_toolkit_flags():
    plan = LaunchPlan(hosts=("algo-1", "algo-2"), current_host="algo-1", processes_per_host=4,
                      network_interface="eth0")
    cmd = mpirun_command(plan, ["python", "-m", "detector_training.rank"], ["SAGEMAKER_BASE_DIR", "AWS_ACCESS_KEY_ID"],
                         ["-x", "FOO=1"], "/lib/gethostname.so")
    text = " ".join(cmd)
    assert cmd[:5] == ["mpirun", "--host", "algo-1:4,algo-2:4", "-np", "8"]
    for flag in ("--allow-run-as-root", "--tag-output", "-mca btl_tcp_if_include eth0",
                 "-mca oob_tcp_if_include eth0", "-mca plm_rsh_no_tree_spawn 1", "-bind-to none",
                 "-map-by slot", "-mca pml ob1", "-mca btl ^openib",
                 "-mca orte_abort_on_non_zero_status 1", "-mca btl_vader_single_copy_mechanism none",
                 "-x NCCL_SOCKET_IFNAME=eth0", "-x LD_PRELOAD=/lib/gethostname.so",
                 "-x SAGEMAKER_BASE_DIR", "-x AWS_ACCESS_KEY_ID", "-x FOO=1"):
        assert flag in text, flag
    assert cmd[-3:] == ["python", "-m", "detector_training.rank"]


def test_one_host_runs_locally_without_interface_pinning():
    plan = LaunchPlan(hosts=("algo-1",), current_host="algo-1", processes_per_host=2)
    cmd = mpirun_command(plan, ["p"], [])
    assert cmd[1:5] == ["--host", "localhost:2", "-np", "2"]
    assert "btl_tcp_if_include" not in cmd and "LD_PRELOAD" not in " ".join(cmd)


def test_secrets_are_forwarded_by_name_only():
    environ = {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "SAGEMAKER_BASE_DIR": "/opt/ml", "UNRELATED": "x"}
    names = forwarded_env_names(environ)
    assert names == ["AWS_SECRET_ACCESS_KEY", "SAGEMAKER_BASE_DIR"]
    plan = LaunchPlan(hosts=("algo-1",), current_host="algo-1", processes_per_host=2)
    assert "s3cr3t" not in " ".join(mpirun_command(plan, ["p"], names))


def test_hyperparameters_never_reach_the_command_line():
    plan = LaunchPlan(hosts=("algo-1", "algo-2"), current_host="algo-1", processes_per_host=1)
    cmd = mpirun_command(plan, ["python", "-m", "detector_training.rank"], [])
    assert cmd[-3:] == ["python", "-m", "detector_training.rank"]
    assert not any(part.startswith("--lr") or ";" in part for part in cmd)
