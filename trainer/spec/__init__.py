"""What a run is, before anything runs: the run config and its sections, their submit-time rules,
the operator's policy and the engine and sampler registries. The API imports these, so every
module here is pydantic + stdlib (no torch: tests/trainer/spec/test_spec_light.py). Nothing is
re-exported: import each name from its module."""
