"""Errors of the skill store. Each carries a stable code and the HTTP status it maps to."""

from __future__ import annotations


class SkillfleetError(Exception):
    """Root of every error skillfleet raises on purpose; `code` and `status` map it to HTTP."""

    code = "skillfleet_error"
    status = 400

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors


class ServiceUnavailable(SkillfleetError):
    """Raised when a service skillfleet needs (the database, Redis) can't be reached now."""

    code = "service_unavailable"
    status = 503


class StoreError(SkillfleetError):
    """Root of every error the store raises on purpose."""

    code = "store_error"
    status = 400


class SkillInvalid(StoreError):
    """Raised when a skill breaks the specification; `errors` lists every problem."""

    code = "skill_invalid"
    status = 422


class SkillTooLarge(StoreError):
    """Raised when a skill is over one of the limits; the message names the limit."""

    code = "skill_too_large"
    status = 413


class ZipTooLarge(StoreError):
    """Raised when an uploaded zip is larger than the upload limit."""

    code = "zip_too_large"
    status = 413


class ArchiveUnsafe(StoreError):
    """Raised when an archive holds an entry that could escape or trick the store."""

    code = "archive_unsafe"
    status = 422


class SkillExists(StoreError):
    """Raised when a skill of that name is already installed."""

    code = "skill_exists"
    status = 409


class SkillBuiltin(StoreError):
    """Raised when a request would change or remove a read-only skill."""

    code = "skill_builtin"
    status = 403


class SkillNotFound(StoreError):
    """Raised when no skill of that name is installed."""

    code = "skill_not_found"
    status = 404


class SkillChanged(StoreError):
    """Raised when a skill's hash is not the one the caller saw."""

    code = "skill_changed"
    status = 409


class HashRequired(StoreError):
    """Raised when enabling an assistant-written skill without the hash the owner reviewed."""

    code = "hash_required"
    status = 422


class SkillLocked(StoreError):
    """Raised when a draft would replace a skill the owner imported, enabled or edited."""

    code = "skill_locked"
    status = 409


class StoreFull(StoreError):
    """Raised when the store already holds the maximum number of skills."""

    code = "store_full"
    status = 409


class InvalidResourcePath(StoreError):
    """Raised when a resource path is absolute, climbs out of the skill or is malformed."""

    code = "invalid_resource_path"
    status = 400


class ResourceNotFound(StoreError):
    """Raised when a skill has no file at that path."""

    code = "resource_not_found"
    status = 404


class ResourceTooLarge(StoreError):
    """Raised when a resource is too large to return to an agent."""

    code = "resource_too_large"
    status = 413


class ImportFailed(StoreError):
    """Raised when a skill could not be fetched from its source."""

    code = "import_failed"
    status = 502


class InvalidSource(StoreError):
    """Raised when an import source (such as a GitHub address) is not one the store accepts."""

    code = "invalid_source"
    status = 400


class NameNotApplicable(StoreError):
    """Raised when a name is given for an import that holds several skills."""

    code = "name_not_applicable"
    status = 400


class ConfigError(StoreError):
    """Raised when configured skill paths can't be loaded; the message names the path."""

    code = "config_invalid"
    status = 500


class ManifestInvalid(StoreError):
    """Raised when a signed manifest is malformed, or its signature does not verify."""

    code = "manifest_invalid"
    status = 422


class SignatureInvalid(StoreError):
    """Raised when a skill's `skillfleet.sig` does not verify: made over another hash or in
    another namespace, cut short, or not an SSH signature at all. Never ignored."""

    code = "signature_invalid"
    status = 422


class SignatureRequired(StoreError):
    """Raised when enabling a held skill (the owner requires signatures from trusted keys and
    it has none) without the explicit override."""

    code = "signature_required"
    status = 409


class KeyInvalid(StoreError):
    """Raised when a key to trust is not an Ed25519, RSA (2048 bits or more) or ECDSA SSH
    public key, or its name is not usable."""

    code = "key_invalid"
    status = 422


class KeyExists(StoreError):
    """Raised when the owner already trusts a key of that name, or that key under another name."""

    code = "key_exists"
    status = 409


class KeyNotFound(StoreError):
    """Raised when the owner trusts no key of that name."""

    code = "key_not_found"
    status = 404


class TooManyKeys(StoreError):
    """Raised when the owner already trusts the most keys one owner may."""

    code = "too_many_keys"
    status = 409


class SigningUnavailable(StoreError):
    """Raised when ssh-keygen, which checks keys and signatures, is missing or did not answer."""

    code = "signing_unavailable"
    status = 503


class PackageNotFound(StoreError):
    """Raised when no package of that name and hash is served (unknown or retired)."""

    code = "package_not_found"
    status = 404


class VersionNotFound(StoreError):
    """Raised when a skill has no version of that hash (never had it, or it was trimmed)."""

    code = "version_not_found"
    status = 404


class VersionNotKept(StoreError):
    """Raised when a skill had that version but its files were not kept (recorded before
    versions were kept), so it can't be made current again."""

    code = "version_not_kept"
    status = 409


class UnsafePath(StoreError):
    """Raised when a name or path would lead outside the folder it belongs in."""

    code = "invalid_name"
    status = 422


class TokenNotFound(StoreError):
    """Raised when the caller's owner has no token with that id."""

    code = "token_not_found"
    status = 404


class InvalidTokenRole(StoreError):
    """Raised when a new token's role is neither `owner` nor `agent`."""

    code = "invalid_role"
    status = 422


class InvalidTokenLabel(StoreError):
    """Raised when a token's label is not a short line of text."""

    code = "invalid_label"
    status = 422


class GitHubSignInError(StoreError):
    """Root of the errors of signing in with GitHub; nothing is granted when one is raised."""

    code = "github_signin_failed"
    status = 502


class GitHubUnavailable(GitHubSignInError):
    """Raised when GitHub can't be reached or answers out of turn (a 5xx, not JSON): try again;
    nothing that was under way ends for it."""

    code = "github_unavailable"
    status = 502


class GitHubSignInOff(GitHubSignInError):
    """Raised when the operator set no GitHub app (SKILLFLEET_GITHUB_CLIENT_ID)."""

    code = "github_signin_off"
    status = 404


class SignInNotFound(GitHubSignInError):
    """Raised when a sign-in id names no sign-in under way (unknown, or already over)."""

    code = "signin_not_found"
    status = 404


class GitHubCodeExpired(GitHubSignInError):
    """Raised when the code shown to the owner expired before it was entered on GitHub."""

    code = "github_code_expired"
    status = 410


class GitHubAccessDenied(GitHubSignInError):
    """Raised when the person pressed Cancel on GitHub's page instead of Authorize."""

    code = "github_access_denied"
    status = 403


class GitHubUserNotAllowed(GitHubSignInError):
    """Raised when the GitHub user is on no rule of SKILLFLEET_GITHUB_SIGNIN."""

    code = "github_user_not_allowed"
    status = 403


class GitHubSessionEnded(GitHubSignInError):
    """Raised when a GitHub sign-in can't be renewed (GitHub refused its refresh token)."""

    code = "github_session_ended"
    status = 401


class NotAGitHubSession(GitHubSignInError):
    """Raised when a token that no GitHub sign-in gave asks to be refreshed."""

    code = "not_a_github_session"
    status = 409


class TooManyTokens(StoreError):
    """Raised when an owner already holds the maximum number of tokens."""

    code = "too_many_tokens"
    status = 409


class JobError(SkillfleetError):
    """Root of the errors about scheduled jobs."""

    code = "job_error"
    status = 400


class JobInvalid(JobError):
    """Raised when a job's steps, grants or skills break a rule; the message says which."""

    code = "job_invalid"
    status = 422


class PinnedVersionUnknown(JobInvalid):
    """Raised when a job step pins a skill version (`name@hash`) the skill does not have."""

    code = "pinned_version_unknown"


class CronInvalid(JobInvalid):
    """Raised when a job's cron is not a standard five-field cron expression."""

    code = "cron_invalid"


class CronNeverFires(CronInvalid):
    """Raised when a job's cron is well formed but names no date that exists (`0 0 31 2 *`)."""

    code = "cron_never_fires"


class TimeZoneUnknown(JobInvalid):
    """Raised when a job's time zone is not an IANA time zone name."""

    code = "time_zone_unknown"


class GrantInvalid(JobInvalid):
    """Raised when a job grants a tool or skill that doesn't exist or needs no grant."""

    code = "grant_invalid"


class JobNotFound(JobError):
    """Raised when the caller has no job with that id."""

    code = "job_not_found"
    status = 404


class JobRunNotFound(JobError):
    """Raised when the caller has no job run with that id."""

    code = "job_run_not_found"
    status = 404


class JobRunEnded(JobError):
    """Raised when a call names a job run that already ended."""

    code = "job_run_ended"
    status = 409


class TooManyJobs(JobError):
    """Raised when an owner already has the most jobs allowed."""

    code = "too_many_jobs"
    status = 409


class JobChanged(JobError):
    """Raised when a job's replacement was made from a reading older than the job."""

    code = "job_changed"
    status = 409


class JobRunning(JobError):
    """Raised when a job is run now while one of its runs is still queued, running or waiting."""

    code = "job_running"
    status = 409
