"""Feedback: thumbs up/down on a model's answers, kept as a versioned dataset in the store."""
