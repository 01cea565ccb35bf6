"""Analysis of launches: the max model, replay stability, explain and compare."""
