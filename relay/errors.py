"""Errors of runs and runners. Each carries a stable code and the HTTP status it maps to."""

from __future__ import annotations

from store.errors import ServiceUnavailable, SkillfleetError


class RunError(SkillfleetError):
    """Root of every error about runs, runners and node packages."""

    code = "run_error"
    status = 400


class NoRunner(RunError):
    """Raised when no live worker serves the queue a run needs."""

    code = "no_runner"
    status = 503


class RunNotFound(RunError):
    """Raised when the caller has no run with that id."""

    code = "run_not_found"
    status = 404


class RunFinished(RunError):
    """Raised when a run can no longer be cancelled because it already ended."""

    code = "run_finished"
    status = 409


class PackageRefused(RunError):
    """Raised when a skill package fails its SHA-256, signature or content-hash check."""

    code = "package_refused"
    status = 422


class PackageUnverified(RunError):
    """Raised when a skill folder does not hash to the run's hash and no fresh copy does."""

    code = "package_unverified"
    status = 422


class RunnerUnavailable(RunError):
    """Raised when a runner can't work on this host (no Docker engine, no KVM)."""

    code = "runner_unavailable"
    status = 503


class BackendUnavailable(ServiceUnavailable, RunError):
    """Raised when Redis (the queue and the output streams) can't be reached."""

    code = "service_unavailable"
    status = 503


class TurnError(RunError):
    """Root of every error about agent turns and the model they run on."""

    code = "turn_error"
    status = 400


class NoModel(TurnError):
    """Raised when an owner asks for an agent turn but configured no model."""

    code = "no_model"
    status = 409


class TurnNotFound(TurnError):
    """Raised when the caller has no turn with that id."""

    code = "turn_not_found"
    status = 404


class TurnFinished(TurnError):
    """Raised when a turn can no longer be stopped because it already ended."""

    code = "turn_finished"
    status = 409


class TurnActive(TurnError):
    """Raised when a chat already has a turn that has not ended."""

    code = "turn_active"
    status = 409


class ModelFailed(TurnError):
    """Raised when the model endpoint can't be reached or answers with an error."""

    code = "model_failed"
    status = 502


class ModelTimedOut(ModelFailed):
    """Raised when the model's answer was not over by its request's deadline."""


class ModelKeyRefused(ModelFailed):
    """Raised when the model answers 401 or 403: the key it was sent is not (or no longer)
    good; a source with a minted LiteLLM key gets a new one once before this ends the turn."""

    code = "model_key_refused"
    status = 502


class ModelRefused(ModelFailed):
    """Raised when the model's address may not be reached (store/egress.py): it is, or now
    resolves to, an address that is not public and the operator did not allow."""

    code = "model_url_refused"
    status = 422


class MessageNotFound(TurnError):
    """Raised when a chat holds no message with the id a regenerate names."""

    code = "message_not_found"
    status = 404


class NoPrompt(TurnError):
    """Raised when a chat request's last message is not a user's text to answer."""

    code = "chat_no_prompt"
    status = 422
