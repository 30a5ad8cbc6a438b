"""Data preparation: sensitive-field scan and de-identification, dedup, quality scores."""
