"""The SageMaker job: the configuration (hyperparameters, config files, the built-in algorithm's
names), the /opt/ml snapshot, the launcher (train), the failure file, logs, start-up guards, metric
definitions, stop requests, the demo (detector-run) and the data check (detector-check-data)."""
