"""The web console every node serves on its HTTP listener (`serve --http-listen`), with
the node's Prometheus metrics and the console's JSON under `/api/`."""
