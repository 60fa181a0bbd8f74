"""Kafka's transactions are not served, and a transactional producer is told so at once.

A Kafka client retries COORDINATOR_NOT_AVAILABLE until its own timeout (librdkafka's
init_transactions() the timeout it is given, the Java client's max.block.ms), so the
refusal is TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the answer both treat as fatal:
librdkafka's FindCoordinator handler (rdkafka_txnmgr.c) fails the producer on it alone,
and the Java client's TransactionManager on any error that is not retriable. It is the
answer to a transaction coordinator's FindCoordinator (key type 1), which a transactional
producer asks first, and to InitProducerId with a transactional id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode as K

TRANSACTION = 1  # FindCoordinator's key type of a transactional id

REFUSAL = {
    "error_code": K.transactional_id_authorization_failed,
    "error_message": (
        "quorumlog does not support Kafka transactions: unset transactional.id "
        "(an idempotent producer still writes each batch once)"
    ),
    "node_id": -1,
    "producer_id": -1,
    "producer_epoch": -1,
}

Handler = Callable[..., Awaitable[dict]]


def without_transactions(init_producer_id: Handler) -> Handler:
    """InitProducerId as `init_producer_id` answers it, refused for a transactional id."""

    async def answer(request, version: int) -> dict:
        if request.transactional_id is not None:
            return REFUSAL
        return await init_producer_id(request, version)

    return answer
