"""Recipes: a catalog of training recipes (data + the code they run) for Hugging Face models."""
