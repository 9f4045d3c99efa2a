"""``GET /v1/models``: the one model warmrag answers with, as OpenAI's API lists models.

OpenAI clients (and chat front-ends such as Open WebUI) list models before they send a
chat and refuse to connect when the list is a 404. warmrag answers every chat with RAG
on its one vLLM model, whatever ``model`` a request names.
"""

from __future__ import annotations

import time
from typing import Literal

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel

from api.deps import SettingsDep
from api.openai_errors import OpenAIErrorResponse

router = APIRouter(
    tags=["openai"],
    responses={
        code: {"model": OpenAIErrorResponse, "description": text}
        for code, text in (
            (401, "Missing or wrong API key (when keys are configured)."),
            (500, "Internal error; `component` and `request_id` identify it."),
        )
    },
)


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "warmrag"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


def _card(settings: SettingsDep) -> ModelCard:
    return ModelCard(id=settings.served_model_name, created=int(time.time()))


@router.get("/v1/models", response_model=ModelList)
async def list_models(settings: SettingsDep) -> ModelList:
    """The served model (``WARMRAG_SERVED_MODEL_NAME``)."""
    return ModelList(data=[_card(settings)])


@router.get(
    "/v1/models/{model:path}",
    response_model=ModelCard,
    responses={404: {"model": OpenAIErrorResponse, "description": "No such model."}},
)
async def retrieve_model(model: str, settings: SettingsDep) -> ModelCard:
    """One model by id: the served model, or a 404."""
    if model != settings.served_model_name:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no model {model!r}: this service answers with {settings.served_model_name!r}",
        )
    return _card(settings)
