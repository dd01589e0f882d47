"""GET /healthz: the service is up and answers; reports the number of live sessions."""

from __future__ import annotations

from fastapi import APIRouter, Request

from agentrl.service.schemas import HealthResponse

router = APIRouter()


@router.get("/healthz")
async def health(request: Request) -> HealthResponse:
    return HealthResponse(status="ok", sessions=len(request.app.state.sessions))
