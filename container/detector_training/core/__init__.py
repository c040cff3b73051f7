"""The training core shared by every detector family: what a run has, the step base, the loop and
its hooks, solver, checkpoints, Horovod, validation and its metrics, networks' weights, fine-tuning,
the model directory, reports, TensorBoard events, safe extraction and atomic writes."""
