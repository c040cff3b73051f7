"""``serve``: SageMaker's inference contract for the models this image trains.

SageMaker starts the model's image as ``serve`` (endpoints and batch transform) after unpacking
the job's ``model.tar.gz`` into ``/opt/ml/model``. gunicorn's master process checks the model
directory and starts pre-forked sync workers; each worker loads the model after the fork (MXNet
is neither fork- nor thread-safe) and runs one warm-up forward pass before it answers anything.

* ``environment.py``: the server's settings from the environment (pure);
* ``formats.py``: what a request may carry and what a response looks like (pure);
* ``app.py``: the WSGI application of one worker (``/ping``, ``/invocations``,
  ``/execution-parameters``);
* ``server.py``: gunicorn, its worker hooks (threads and devices per worker) and the ``serve``
  command.
"""
