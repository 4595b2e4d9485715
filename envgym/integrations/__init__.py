"""Adapters that load envgym environments into other training and evaluation stacks (TRL, verifiers)."""
