"""The clients: `Client` (blocking) and `AsyncClient` (trio), consumers, their wire protocol,
routing to leaders, batching and the errors they raise. Import them from `quorumlog`."""
