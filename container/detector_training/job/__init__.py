"""The SageMaker job: the /opt/ml snapshot, the launcher (train), one rank, start-up guards, metric definitions, stop requests."""
