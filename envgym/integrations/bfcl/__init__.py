"""BFCL (the Berkeley Function Calling Leaderboard, the `bfcl-eval` wheel) as envgym environments.

`envgym/bfcl-multi-turn-v0` (`multi_turn.BfclMultiTurnEnv`) runs a multi-turn entry on BFCL's own backends and
grades it with BFCL's multi-turn checker; `envgym/bfcl-v0` (`single_turn.BfclEnv`) grades a single-turn response
with BFCL's AST checker. `oracle` plays BFCL's ground truth, `evaluate` reports accuracy per category as BFCL does.

bfcl-eval pins numpy 1.26 and imports every provider SDK from its handlers, but its backends, checkers and loaders
need only the standard library and filelock: it is installed into envgym's own environment without its
dependencies (`scripts/install.sh`), so these envs are made with `gym.make`, pickle and are served like any other.
"""

MULTI_TURN_ID = "envgym/bfcl-multi-turn-v0"
SINGLE_TURN_ID = "envgym/bfcl-v0"
