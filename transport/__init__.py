"""Wire protocol and transport: messages, codec, framing, TCP and in-memory networks.

The interface the consensus code uses, and how the TCP and the in-memory networks both
provide it, is described in transport/network.py. Modules:

    messages      one frozen dataclass per message type, the enums they use
    codec         message <-> frame bytes (length prefix + msgpack array), strict decoding
    framing       FrameDecoder: sans-I/O, bytes in, frames out
    network       the interface: Handler, ConnectionInfo, Limits, NodeTransport, ClientConnection
    connection    one established connection: pipelined requests, one-way messages, handler
    auth          HMAC-SHA256 proofs of the cluster secret
    handshake     hello / challenge / proof / accepted over a fresh stream
    listener      the node's TCP listener: limits, TLS, handshake, a Connection per socket
    peer_link     the outbound connection actor for one peer, redialling with backoff
    backoff       jittered exponential backoff from a seeded generator
    tcp           open_tcp_transport (a node), open_connection (a client), dial
    memory        MemoryNetwork: the same interface in memory, with faults, for simulation
    addresses     "host:port" parsing and the loopback check
    errors        TransportError, ProtocolError, AuthError, ConnectionClosed

Import from the modules themselves (`from transport.tcp import open_tcp_transport`). This
package knows nothing of Raft rules or disks; batches are opaque bytes to it.
"""
