"""Adapters between envgym and other stacks: TRL training (trl.py) and the AgentDojo benchmark (agentdojo/); each
needs its own optional packages (see its module)."""
