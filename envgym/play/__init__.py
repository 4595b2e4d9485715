"""Playing episodes: the one episode loop and trajectory record, every policy, and evaluation."""
