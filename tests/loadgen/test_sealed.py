"""The sealed transport (loadgen/engine/sealed.py) end to end over loopback ZeroMQ, in a child process
(it imports locust, which patches a process for gevent): handshake, identity, replay, no answer to strangers."""

from __future__ import annotations

import json
import subprocess
import sys

from rushhour.loadgen import runkey
from rushhour.loadgen.testbed_proc import child_env

SCRIPT = r'''
import json
import gevent
import locust  # gevent's patching, as in a Locust process
import locust.exception
from locust.rpc.protocol import Message
from rushhour.loadgen.engine import sealed

server = sealed.SealedServer("127.0.0.1", 0)
client = sealed.SealedClient("127.0.0.1", server.port, "w1")
wire = []  # every frame the worker put on the wire
send = client.socket.send
client.socket.send = lambda data, *a, **k: (wire.append(bytes(data)), send(data, *a, **k))[1]
to_worker = []
master_send = server.socket.send_multipart
server.socket.send_multipart = lambda parts, *a, **k: (to_worker.append(list(parts)), master_send(parts, *a, **k))[1]

def next_at_master():
    return gevent.spawn(server.recv_from_client).get(timeout=30)  # a hang guard, not a time bound

got = []

def worker_loop():
    while True:
        got.append(client.recv())

gevent.spawn(worker_loop)
client.send(Message("client_ready", "2.47.0", "w1"))
addr, ready = next_at_master()
out = {"first": [addr, ready.type, ready.node_id]}
client.socket.send(wire[-1])  # the same frame again: a replay
client.send(Message("rh_finished", {}, "someone-else"))  # claims another id in the message
addr, finished = next_at_master()
out["claimed"] = [addr, finished.type, finished.node_id]
server.send_to_client(Message("ack", {"index": 0}, "w1"))
server.send_to_client(Message("spawn", {"secret": "x"}, "stranger"))  # never joined: nothing sent
gevent.sleep(0.3)
server.socket.send_multipart(to_worker[-1])  # the master's last frame again, to the worker
gevent.sleep(0.3)
first = server
port = server.port  # Locust rebuilds its server socket after a network error: the workers stay in
server.close(linger=0)
for _ in range(50):  # ZeroMQ closes the old socket asynchronously: the port may still be held for a moment
    try:
        server = sealed.SealedServer("127.0.0.1", port)
        break
    except locust.exception.RPCError:
        gevent.sleep(0.1)
def beating():  # as Locust's worker does: a beat written into the dying old connection is lost, the next arrives
    while True:
        client.send(Message("heartbeat", {"state": "running"}, "w1"))
        gevent.sleep(0.2)

beats = gevent.spawn(beating)
addr, beat = next_at_master()
beats.kill()
out["after_reset"] = [addr, beat.type]
out["worker_got"] = [m.type for m in got]
out["master_rejected"] = dict(server.rejected)
out["first_rejected"] = dict(first.rejected)
out["worker_rejected"] = dict(client.rejected)
out["peers"] = sorted(server.peers)
print(json.dumps(out))
'''


def test_the_handshake_binds_identity_and_drops_replays() -> None:
    env = child_env({runkey.SECRET_ENV: runkey.new_secret()})
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["first"] == ["w1", "client_ready", "w1"]
    assert got["claimed"] == ["w1", "rh_finished", "w1"]  # the connection's identity, not the message's claim
    assert got["master_rejected"] == {}, got  # the rebuilt server's own count (run.json sums them all)
    assert got["first_rejected"] == {"replayed": 1, "unsent_to_unauthenticated": 1}, got
    assert got["worker_got"] == ["ack"] and got["worker_rejected"] == {"replayed": 1}, got
    assert got["peers"] == ["w1"] and got["after_reset"] == ["w1", "heartbeat"]
