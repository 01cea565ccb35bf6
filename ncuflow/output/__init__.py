"""Outputs: parquet, console tables, Markdown reports and plots."""
