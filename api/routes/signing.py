"""The tenant's signing secret: every HTTP job call and webhook is signed with it (Standard
Webhooks), so a receiver can verify that the scheduler sent it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, status

from api.ratelimit import ReaderDep, WriterDep
from api.routes.common import ERRORS
from api.signing import SigningSecrets, SigningService

router = APIRouter(tags=["signing"])


async def _service(request: Request) -> SigningService:
    service: SigningService = request.app.state.signing
    return service


SigningDep = Annotated[SigningService, Depends(_service)]


@router.get("/signing-secret", responses=ERRORS)
async def get_signing_secret(who: ReaderDep, signing: SigningDep) -> SigningSecrets:
    """The secrets that sign the tenant's deliveries now (made on first use), current first."""
    return await signing.secrets(who.tenant_id)


@router.post("/signing-secret/rotate", status_code=status.HTTP_201_CREATED, responses=ERRORS)
async def rotate_signing_secret(who: WriterDep, signing: SigningDep) -> SigningSecrets:
    """A new secret, first in the answer; the replaced one signs beside it for the rotation
    window (``SCHEDULER_SIGNING_ROTATION_HOURS``), then stops. At most three sign at once: a
    rotation past that ends the oldest at once."""
    return await signing.rotate(who.tenant_id)
