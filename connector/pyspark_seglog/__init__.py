"""Spark data source for seglog logs (format("seglog")). The connector lands in a later step."""
