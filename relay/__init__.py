"""What the API and the workers share: queue and key names, the Celery app, sending work, run
and turn streams, owner feeds, heartbeats and the errors of runs and turns."""
