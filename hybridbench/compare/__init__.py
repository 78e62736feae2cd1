"""Compare two saved runs: a pull request's against main's (``python -m hybridbench.compare``)."""
