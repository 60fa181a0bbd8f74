"""Kafka's ACL calls. quorumlog has no ACLs: a cluster's security is its secret (with
`--secret-file`, every Kafka client authenticates with it over SASL/PLAIN, actors/kafka/
sasl.py) and a client that has it may do anything. So DescribeAcls, CreateAcls and
DeleteAcls are answered as a Kafka broker without an authorizer answers them,
SECURITY_DISABLED, saying so; and Metadata and DescribeCluster, asked which operations a
client may do, name every operation of the resource, as that broker does.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode as K

NO_ACLS = (
    "No Authorizer is configured: quorumlog has no ACLs; "
    "the cluster's security is its secret (SASL/PLAIN with --secret-file)"
)

# Kafka's AclOperation codes.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12


def _bits(*operations: int) -> int:
    return sum(1 << op for op in operations)


TOPIC_OPERATIONS = _bits(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE)
TOPIC_OPERATIONS |= _bits(DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = _bits(CREATE, ALTER, DESCRIBE, CLUSTER_ACTION)
CLUSTER_OPERATIONS |= _bits(DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE)


async def describe_acls(request, version: int) -> dict:
    return {"error_code": K.security_disabled, "error_message": NO_ACLS}


async def create_acls(request, version: int) -> dict:
    refused = {"error_code": K.security_disabled, "error_message": NO_ACLS}
    return {"results": [refused for _ in request.creations]}


async def delete_acls(request, version: int) -> dict:
    refused = {"error_code": K.security_disabled, "error_message": NO_ACLS}
    return {"filter_results": [refused for _ in request.filters]}
