"""The node: builds its services (actors/services/), hosts its replicas, and runs what
spans them all: the group manager, leader balance, burial of moved replicas, a planned stop."""
