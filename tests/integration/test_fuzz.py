"""API fuzzing: schemathesis generates requests from the service's own OpenAPI document and sends them to a
real uvicorn server on a loopback port (`EmbeddedService`, bearer token on); no response may be a 5xx.

Random ids would only ever meet "unknown env" and "unknown session" (404), so half of the generated cases
are pointed at real targets: a create-session body gets a real env id (its task and seed stay fuzzed, so
they reach the env's reset), and a path's session id is replaced by a session created for that one case
(so fuzzed step bodies reach the env's step). The test env is GuessNumber from `fixtures_envs`; envs that
report infrastructure failures as 503 on purpose (LostSandbox) are never targeted.

Bounded: `MAX_EXAMPLES` per operation and no Hypothesis deadline; the whole module runs in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fixtures_envs import GUESS_NUMBER_ID
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from agentrl.service.embedded import EmbeddedService
from agentrl.wire import TOKEN_ENV

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_EXAMPLES = 60


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedService]:
    log = Path(tmp_path_factory.mktemp("fuzz")) / "service.log"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TOKEN_ENV, TOKEN)  # inherited by the service process
        with EmbeddedService(log, preload=["fixtures_envs"]) as running:
            yield running


@pytest.fixture(scope="module")
def api_schema(service: EmbeddedService) -> Any:
    document = httpx.get(f"{service.url}/openapi.json", headers=AUTH, trust_env=False).json()
    return schemathesis.openapi.from_dict(document)


def real_session(base_url: str) -> str:
    created = httpx.post(
        f"{base_url}/v1/sessions",
        json={"env_id": GUESS_NUMBER_ID, "task": {"target": 50}, "seed": 0},
        headers=AUTH,
        trust_env=False,
    )
    assert created.status_code == 201, created.text
    session_id: str = created.json()["session_id"]
    return session_id


def aim(case: Any, base_url: str) -> str | None:
    """Point half of the cases at real targets (see the module docstring); returns a session to close."""
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("env_id"), str) and len(body["env_id"]) % 2 == 0:
        body["env_id"] = GUESS_NUMBER_ID
    session_id = (case.path_parameters or {}).get("session_id")
    if isinstance(session_id, str) and len(session_id) % 2 == 0:
        case.path_parameters["session_id"] = real_session(base_url)
        return str(case.path_parameters["session_id"])
    return None


def check_no_5xx(case: Any, base_url: str) -> None:
    opened = aim(case, base_url)
    try:
        response = case.call(base_url=base_url, headers=AUTH)
    finally:
        if opened is not None:
            httpx.delete(f"{base_url}/v1/sessions/{opened}", headers=AUTH, trust_env=False)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} answered {response.status_code}: {response.text[:500]}\n"
        f"reproduce: {case.as_curl_command()}"
    )


# Built here rather than with `schemathesis.pytest.from_fixture`, whose lazy loading breaks on pytest 9.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_no_generated_request_gets_a_5xx(
    api_schema: Any, service: EmbeddedService, mode: GenerationMode
) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {f"{op.method.upper()} {op.path}" for op in operations} >= {
        "POST /v1/sessions",
        "POST /v1/sessions/{session_id}/step",
        "DELETE /v1/sessions/{session_id}",
    }
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not operation.body:
            continue  # only a body can be made invalid: any string is a valid path id, GETs take nothing

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def fuzz(case: Any) -> None:
            check_no_5xx(case, service.url)

        fuzz()
