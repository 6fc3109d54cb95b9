"""Production outputs of a judged report: JUnit XML, Prometheus textfile, and the run history (SQLite)."""
