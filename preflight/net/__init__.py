"""Network helpers shared by checks: interface selection, `ip`/`ss`/ping parsers, blame rules."""
