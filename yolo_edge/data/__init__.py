"""Datasets: the synthetic shapes generator and loaders for labelled validation data."""
