"""CLI subcommands: each module defines `register(subparsers)`; `envgym.cli` discovers them."""
