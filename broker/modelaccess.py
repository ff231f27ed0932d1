"""Reaching an owner's model sources: the config a turn runs with, a source's model list, and
the virtual keys a LiteLLM source takes (seed 003).

A `litellm` source with `virtual_key` gets one key per owner, minted with the operator's
master key (`POST /key/generate` on the operator's LiteLLM, `Authorization: Bearer <master>`,
the owner and source named in the key's metadata) and kept sealed on the source. When the
source answers 401 or 403, a new key is minted once and the request made again. The master
key goes only to the operator's LiteLLM (SKILLFLEET_LITELLM_URL): a source elsewhere can't
ask for one. Every request goes through the egress rules and is over by its deadline.

A model list is the source's `GET <base_url>/models` (the OpenAI `{"data": [{"id"}]}` answer;
`<base_url>/v1/models` when the first is 404 and the URL lacks `/v1`). A list that can't be
had raises one of four stable codes: `source_unreachable`, `source_key_refused`,
`source_refused_address`, `source_bad_answer`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import httpx

from broker.errors import BrokerError
from broker.modelanswers import KEY_REFUSED, error_message, status_failure
from store import modelsettings, modelsources
from store.db import SessionFactory, transaction
from store.deadlines import Deadline
from store.egress import Egress, EgressRefused, read_at_most
from store.limits import MAX_MODEL_LIST_BYTES, MAX_MODELS_LISTED, MODEL_LIST_SECONDS
from store.modelchoice import ModelChoice
from store.models import Owner
from store.modelsettings import ModelConfig
from store.modelsources import SourceRefusedAddress, VirtualKeysUnavailable
from store.secrets import Sealer
from store.settings import Settings

USER_AGENT = "skillfleet-model/1"


class SourceUnreachable(BrokerError):
    """Raised when a source can't be reached, or did not answer by its deadline."""

    code = "source_unreachable"
    status = 502


class SourceKeyRefused(BrokerError):
    """Raised when a source answers 401 or 403 to the key it was sent."""

    code = "source_key_refused"
    status = 502


class SourceBadAnswer(BrokerError):
    """Raised when a source answers with an error or with something that is no model list."""

    code = "source_bad_answer"
    status = 502


class VirtualKeyFailed(BrokerError):
    """Raised when the operator's LiteLLM does not mint a virtual key."""

    code = "virtual_key_failed"
    status = 502


@dataclass(frozen=True)
class LiteLLM:
    """The operator's LiteLLM proxy (its root URL) and master key; unset: no virtual keys."""

    url: str | None = None
    master_key: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, settings: Settings) -> LiteLLM:
        return cls(settings.litellm_url, settings.litellm_master_key)

    def check_serves(self, base_url: str) -> None:
        """VirtualKeysUnavailable unless keys for a source at `base_url` may be minted."""
        if not self.url or not self.master_key:
            raise VirtualKeysUnavailable(
                "This server mints no LiteLLM virtual keys (the operator sets "
                "SKILLFLEET_LITELLM_URL and SKILLFLEET_LITELLM_MASTER_KEY); give the source an "
                "api_key instead."
            )
        if _origin(base_url) != _origin(self.url):
            raise VirtualKeysUnavailable(
                f"Virtual keys are minted only for a source at the operator's LiteLLM, "
                f"{self.url}; give this source an api_key instead."
            )

    def default_url(self) -> str | None:
        """The OpenAI-compatible base URL of the operator's LiteLLM."""
        return f"{self.url}/v1" if self.url else None

    def mint(
        self, egress: Egress, owner: str, source: str, deadline: Deadline | None = None
    ) -> str:
        """A new virtual key for `owner`'s `source`, over by `deadline` (MODEL_LIST_SECONDS)."""
        assert self.url and self.master_key
        where = f"The LiteLLM at {self.url}"
        body = {"metadata": {"skillfleet_owner": owner, "skillfleet_source": source}}
        headers = {"Authorization": f"Bearer {self.master_key}", "User-Agent": USER_AGENT}
        deadline = deadline or Deadline.after(MODEL_LIST_SECONDS)
        try:
            with egress.client(deadline, follow_redirects=False) as client:
                url = f"{self.url}/key/generate"
                with client.stream("POST", url, json=body, headers=headers) as response:
                    if not response.is_success:
                        failure = status_failure(response, self.master_key)
                        raise VirtualKeyFailed(f"{where} minted no key: it answered {failure}")
                    answer = _json(read_at_most(response, MAX_MODEL_LIST_BYTES))
        except EgressRefused as e:
            raise VirtualKeyFailed(f"{where} is refused: {e.message}") from e
        except httpx.TimeoutException as e:
            raise VirtualKeyFailed(f"{where} did not answer within {deadline.seconds:g} s.") from e
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            raise VirtualKeyFailed(f"{where} can't be reached.") from e
        key = answer.get("key") if isinstance(answer, dict) else None
        if not isinstance(key, str) or not key:
            raise VirtualKeyFailed(f"{where} answered /key/generate without a key.")
        return key


@dataclass
class ModelAccess:
    """Configs and model lists of an owner's sources, minting virtual keys as they are needed."""

    sessions: SessionFactory
    sealer: Sealer
    egress: Egress = field(default_factory=Egress)
    litellm: LiteLLM = field(default_factory=LiteLLM)
    list_seconds: float = MODEL_LIST_SECONDS  # how long listing a source's models may take

    def minted(self, config: ModelConfig | None, owner_id: int) -> ModelConfig | None:
        """`config` (what `modelsettings.read` gave for the owner) with a key minted if its
        source mints keys and has none yet."""
        if config is not None and config.virtual_key and config.api_key is None:
            config = self.remint(owner_id, config)
        return config

    def remint(
        self, owner_id: int, config: ModelConfig, deadline: Deadline | None = None
    ) -> ModelConfig:
        """`config` with a newly minted virtual key, which its source keeps (sealed)."""
        self.litellm.check_serves(config.base_url)
        with self.sessions() as session:
            owner = session.get(Owner, owner_id)
            assert owner is not None  # the caller acts for this owner
            name = owner.name
        key = self.litellm.mint(self.egress, name, config.source, deadline)
        with transaction(self.sessions) as session:
            row = modelsources.find(session, owner_id, config.source)
            if row is not None and row.virtual_key and row.base_url == config.base_url:
                row.minted_key = self.sealer.seal(key)
        return replace(config, api_key=key)

    def models(self, owner_id: int, name: str) -> list[str]:
        """The model names the owner's source `name` lists (SourceNotFound: no such source),
        every request (a key's mint included) over by one deadline."""
        deadline = Deadline.after(self.list_seconds)
        with self.sessions() as session:
            source = modelsources.get(session, owner_id, name)
            config = modelsettings.config_of(source, self.sealer, ModelChoice(name, "-"))
        if config.virtual_key and config.api_key is None:
            config = self.remint(owner_id, config, deadline)
        try:
            return list_models(config.base_url, config.api_key, self.egress, deadline)
        except SourceKeyRefused:
            if not config.virtual_key:
                raise
        key = self.remint(owner_id, config, deadline).api_key
        return list_models(config.base_url, key, self.egress, deadline)


def list_models(
    base_url: str, key: str | None, egress: Egress, deadline: Deadline | None = None
) -> list[str]:
    """The names a source's model list gives, sorted, at most MAX_MODELS_LISTED."""
    where = f"The source at {base_url}"
    deadline = deadline or Deadline.after(MODEL_LIST_SECONDS)
    headers = {"Authorization": f"Bearer {key or 'none'}", "User-Agent": USER_AGENT}
    urls = [f"{base_url}/models"]
    if not base_url.endswith("/v1"):
        urls.append(f"{base_url}/v1/models")
    try:
        with egress.client(deadline, follow_redirects=False) as client:
            for url in urls:
                with client.stream("GET", url, headers=headers) as response:
                    if response.status_code == 404 and url != urls[-1]:
                        continue
                    return _names(response, where, key)
    except EgressRefused as e:
        raise SourceRefusedAddress(f"{where} is refused: {e.message}") from e
    except httpx.TimeoutException as e:
        message = f"{where} did not answer within {deadline.seconds:g} seconds."
        raise SourceUnreachable(message) from e
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise SourceUnreachable(f"{where} can't be reached.") from e
    raise AssertionError("the last URL always returns or raises")


def _names(response: httpx.Response, where: str, key: str | None) -> list[str]:
    if response.status_code in KEY_REFUSED:
        raise SourceKeyRefused(f"{where} refused the key: {status_failure(response, key)}")
    if not response.is_success:
        raise SourceBadAnswer(f"{where} answered {status_failure(response, key)}")
    answer = _json(read_at_most(response, MAX_MODEL_LIST_BYTES))
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        reason = error_message(answer, key)
        said = f": {reason}" if reason else "."
        raise SourceBadAnswer(f"{where} answered with no model list (OpenAI's /models){said}")
    found = {item["id"] for item in data if isinstance(item, dict) and _printable(item.get("id"))}
    return sorted(found)[:MAX_MODELS_LISTED]


def _printable(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 200 and value.isprintable()


def _json(body: bytes | None) -> object:
    try:
        return None if body is None else json.loads(body)
    except ValueError:
        return None


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port
