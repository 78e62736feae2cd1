"""The static dashboard: ``python -m hybridbench.dashboard RESULTS_DIR -o SITE_DIR``."""
