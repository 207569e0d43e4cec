"""AERO Lab dashboard (Streamlit + Plotly). Talks to the backend over HTTP only (docs/architecture.md §1)."""
