"""The Kafka listener: Kafka's wire protocol over the same topics, partitions and offsets
the native protocol serves (one store, two protocols). `listener.py` frames connections,
`api.py` routes each request to the module that answers it."""
