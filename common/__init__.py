"""Contracts every layer shares: stdlib only, importing nothing of the project.

``metric_keys`` (the metric keys more than one package writes or reads), ``dotted``
(dotted keys <-> nested dicts, as configs and sweep overrides spell them) and ``fmt`` (result
texts: mean ± CI, ratios, p-values, compute to reach, as every client prints them). The trainer, the
backend, the CLI and the dashboard (which otherwise reaches the platform over HTTP only) import
these, so a key or a path rule is written once and no layer imports another to get it.
"""
