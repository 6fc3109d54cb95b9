"""What people read: every rich table, live progress and summary. The only package that imports rich."""
