"""/api/methods: the training methods the platform knows, as their specs (trainer/methods/spec.py).

The dashboard and the CLI take method names, labels, colours and config sections from here,
so a new method shows up everywhere without a client change."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.deps import ReadAccess
from backend.schemas import MethodsPublic
from trainer.methods.spec import specs

router = APIRouter(tags=["methods"], dependencies=[ReadAccess])


@router.get("/methods", response_model=MethodsPublic)
def list_methods():
    """Every registered method, in display order."""
    return {"methods": [s.to_json() for s in specs()]}
