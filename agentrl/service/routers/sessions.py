"""POST /v1/sessions, POST /v1/sessions/{id}/step, POST /v1/sessions/{id}/fork, DELETE /v1/sessions/{id}.

A DELETE's answer carries `X-Agentrl-Tree-Sessions`: the sessions of the closed one's fork tree still live
here, which the fleet's balancer reads to forget the tree's route only with its last session."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request, Response

from agentrl.service.schemas import (
    CreateSessionRequest,
    CreateSessionResponse,
    ForkedSessionModel,
    ForkRequest,
    ForkResponse,
    StepRequest,
    StepResponse,
)
from agentrl.service.sessions import SessionManager

router = APIRouter(prefix="/v1/sessions")

TREE_SESSIONS_HEADER = "X-Agentrl-Tree-Sessions"


def _sessions(request: Request) -> SessionManager:
    manager: SessionManager = request.app.state.sessions
    return manager


@router.post("", status_code=201)
async def create_session(body: CreateSessionRequest, request: Request) -> CreateSessionResponse:
    start = await _sessions(request).create(body.env_id, body.task, body.seed)
    return CreateSessionResponse(**asdict(start))


@router.post("/{session_id}/step")
async def step(session_id: str, body: StepRequest, request: Request) -> StepResponse:
    result = await _sessions(request).step(session_id, body.action.to_action())
    return StepResponse(**result._asdict())


@router.post("/{session_id}/fork", status_code=201)
async def fork_session(session_id: str, body: ForkRequest, request: Request) -> ForkResponse:
    forks = await _sessions(request).fork(session_id, body.n)
    return ForkResponse(sessions=[ForkedSessionModel(**asdict(fork)) for fork in forks])


@router.delete("/{session_id}", status_code=204)
async def close_session(session_id: str, request: Request) -> Response:
    await _sessions(request).close(session_id)
    left = _sessions(request).tree_size(session_id)
    return Response(status_code=204, headers={TREE_SESSIONS_HEADER: str(left)})
