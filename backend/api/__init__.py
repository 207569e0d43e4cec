"""HTTP layer: thin routes over backend.db and backend.services."""
