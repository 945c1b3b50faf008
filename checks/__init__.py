"""The checks, one module per check id; installed as `preflight.checks` (see preflight.checkapi)."""
