"""The training core shared by every detector family: configuration, loop and hooks, solver, checkpoints, Horovod, validation, report."""
