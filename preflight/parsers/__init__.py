"""Pure parsers of vendor tool output, shared by several checks. Tested on the real samples."""
