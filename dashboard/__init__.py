"""AERO Lab dashboard (Streamlit + Plotly). Talks to the backend over HTTP only (DESIGN.md §1)."""
