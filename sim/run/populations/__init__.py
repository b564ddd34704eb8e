"""Populations: many seeds and hyper-parameter settings trained in one program (population: the
members, their configs and reports; pbt: population-based training's steps between epochs)."""
