"""Routers, one file per resource."""
