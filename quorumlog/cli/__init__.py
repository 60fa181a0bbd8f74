"""The `quorumlog` command line (`main.py`), one module per noun, and the local clusters
that `dev`, `demo` and the tests start."""
