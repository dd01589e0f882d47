"""GET /v1/envs: every registered env (installed plugins included) with its tool specs."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from agentrl.env import list_envs
from agentrl.service.schemas import EnvInfoModel, EnvListResponse

router = APIRouter(prefix="/v1")


@router.get("/envs")
async def get_envs() -> EnvListResponse:
    infos = await run_in_threadpool(list_envs)  # the first call imports plugins
    models = [
        EnvInfoModel(id=i.id, entry_point=i.entry_point, tools=[dict(t) for t in i.tools], plugin=i.plugin)
        for i in infos
    ]
    return EnvListResponse(envs=models)
