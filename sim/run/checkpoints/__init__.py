"""Checkpoints: what a run writes and how it resumes (checkpoint: the format and its checks; saving: the
writer; resume: a run picked up from its newest checkpoint)."""
