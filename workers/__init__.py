"""Celery workers: the control queue, a queue per node, the Spark and the KVM sandbox hosts."""
