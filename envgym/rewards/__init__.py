"""Rewards: the verifiable rubric, an LLM judge and per-tool-call rewards."""
