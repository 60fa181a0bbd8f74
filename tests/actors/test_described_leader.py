"""`topic describe` names the table's leader only where the replicas that answered leave it
possible (issue 45): a leader that says it is not one, or that too few replicas could still
follow, is shown as none, as an append would find."""

from quorumlog.actors.cluster.topic_calls import _believed
from quorumlog.controller.leaders import LeaderEntry

LED_BY_3 = LeaderEntry("t", 0, 3, 7, 2)


def replica(node_id: int, leader_id: int | None, term: int = 7) -> dict:
    return {"node_id": node_id, "leader_id": leader_id, "term": term, "role": "follower"}


def test_the_table_leader_stands_while_a_majority_could_follow_it():
    assert _believed(LED_BY_3, (1, 2, 3), []) == 3  # nobody answered: the table's word
    assert _believed(LED_BY_3, (1, 2, 3), [replica(1, 3)]) == 3
    assert _believed(LED_BY_3, (1, 2, 3), [replica(1, None)]) == 3  # 2 and 3 may follow


def test_a_leader_that_answered_otherwise_or_lost_its_majority_is_none():
    assert _believed(LED_BY_3, (2, 3), [replica(3, None)]) is None  # stepped down
    assert _believed(LED_BY_3, (2, 3), [replica(2, None)]) is None  # node 3 down, 2 of 2
    assert _believed(LED_BY_3, (1, 2, 3), [replica(1, None), replica(2, None, term=8)]) is None
    assert _believed(None, (1, 2, 3), [replica(1, None)]) is None
