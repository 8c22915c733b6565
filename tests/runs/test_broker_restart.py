"""A worker survives its broker restarting at any moment (issue 19, item 1).

A production probe saw a fresh Celery worker exit when Redis restarted 0.2–0.5 s after
the worker became ready with runs just handed to it: ``Unrecoverable error:
AttributeError("'NoneType' object has no attribute 'hostname'")`` from kombu's Redis
transport (the cause, and the mend: ``apps/runs/kombu_compat.py``).

Both tests use a redis-server of their own (the machine's is shared and never
restarted): one replays kombu's teardown in this process, the other restarts Redis under
real worker processes.
"""

from __future__ import annotations

import time

import pytest
import redis.exceptions
from celery import Celery
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.transport import redis as kombu_redis

from apps.runs import kombu_compat, queue
from apps.runs.models import Run
from tests.runs.conftest import finished, gold_script, wait_for
from tests.support import processes
from tests.support.scripts import queued_run
from tests.support.servers import RedisServer

# Seconds between a fresh worker's first answer and the restart: the probe's window.
RESTART_DELAYS = (0.2, 0.3, 0.4, 0.5, 0.25)
THREADS = 4
# Fewer runs than threads: the worker holds their messages unacknowledged (acks_late)
# and still has a BRPOP in flight for more, as the probe's fresh worker had.
RUNS_HANDED_OVER = 2


@pytest.fixture
def redis_server():
    with RedisServer() as server:
        yield server


def _broken_teardown(redis_server: RedisServer):
    """What Celery's consumer does when Redis goes away under it, with the state of the
    probe's worker: one message delivered and not acknowledged on the default channel,
    a ``BRPOP`` in flight there, and a remote-control channel whose auto-delete fanout
    queue cannot be deleted with Redis gone. Returns the connection (collected, then
    closed, as ``Consumer.on_connection_error_after_connected`` does) and the message."""
    connection = Connection(redis_server.url())
    channel = connection.default_channel
    tasks = Queue("tasks", Exchange("tasks"), "tasks")
    Producer(channel).publish(
        {"run": 1}, exchange=tasks.exchange, routing_key="tasks", declare=[tasks]
    )
    delivered = []
    Consumer(
        channel, [tasks], callbacks=[lambda body, message: delivered.append(message)]
    ).consume()
    connection.drain_events(timeout=5)
    remote_control = connection.channel()
    pidbox = Queue("node.pidbox", Exchange("pidbox", type="fanout"), auto_delete=True)
    Consumer(remote_control, [pidbox], callbacks=[lambda body, message: None]).consume()
    channel._brpop_start()
    assert len(delivered) == 1 and channel.qos._delivered and channel._in_poll

    redis_server.stop()
    connection.collect(socket_timeout=1)
    assert channel.connection.client is None  # the transport is detached
    connection.close()
    return connection, delivered[0]


def test_kombus_teardown_after_losing_redis_ends_in_connection_errors(redis_server):
    assert kombu_compat.installed()  # by RunsConfig.ready
    connection, message = _broken_teardown(redis_server)
    assert message.channel.closed
    errors = message.channel.connection_errors
    with pytest.raises(errors):  # what Celery's ack_log_error logs as "Couldn't ack"
        message.ack()


def test_without_the_mend_kombus_teardown_raises_what_ended_the_worker(redis_server, monkeypatch):
    """The mend is still needed: once a kombu release fixes this, this test fails and
    apps/runs/kombu_compat.py can go."""
    monkeypatch.setattr(
        kombu_redis.Channel, "_connparams", kombu_redis.Channel._connparams.__wrapped__
    )
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'hostname'"):
        _broken_teardown(redis_server)


def test_an_untested_kombu_refuses_to_start(monkeypatch):
    monkeypatch.setattr(kombu_compat, "_installed_version", lambda: "5.8.0")
    with pytest.raises(kombu_compat.UntestedKombu, match="kombu 5.8.0 is installed"):
        kombu_compat.install()


def _client(redis_server: RedisServer) -> Celery:
    """A Celery client of ``redis_server`` alone (the project's app sends to the suite's
    Redis: a ping through it never reaches the worker)."""
    return Celery("broker-restart", broker=redis_server.url(), set_as_current=False)


def _answers(redis_server: RedisServer, node: str) -> bool:
    """Whether ``node`` answers a Celery ping through ``redis_server`` (a new client
    each time: the last one's connections may have died with the server)."""
    client = _client(redis_server)
    try:
        return bool(client.control.ping(destination=[node], timeout=0.5))
    except (OSError, redis.exceptions.ConnectionError):  # the server is still starting
        return False
    finally:
        client.close()


def _send_runs(redis_server: RedisServer, runs: list[Run], *, queue_name: str) -> None:
    client = _client(redis_server)
    try:
        for run in runs:
            client.send_task(queue.EXECUTE_RUN, args=[run.pk], queue=queue_name)
    finally:
        client.close()


def _alive_and_answering(worker: processes.Process, redis_server: RedisServer) -> bool:
    """Wait until ``worker`` answers a ping (True) or exits (False)."""
    deadline = time.monotonic() + 90
    while not _answers(redis_server, worker.node):
        if worker.proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            pytest.fail(f"{worker.node} neither answers nor exits after 90 s")
        time.sleep(0.05)
    return True


@pytest.mark.slow
def test_fresh_workers_survive_redis_restarting_just_after_they_became_ready(
    redis_server, llm_server, alice, settings
):
    gold_script(llm_server, delay=0.5)  # each run takes a few seconds: in flight at the restart
    queue_name = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-broker-restart"
    env = processes.environment(
        llm=llm_server, extra={"REDIS_URL": redis_server.url(), "CELERY_QUEUE": queue_name}
    )
    alive = []
    for attempt, delay in enumerate(RESTART_DELAYS):
        # Runs waiting for the fresh worker, as if the reaper had just re-queued them.
        runs = [queued_run(alice) for _ in range(RUNS_HANDED_OVER)]
        _send_runs(redis_server, runs, queue_name=queue_name)
        worker = processes.start_worker(
            env, queue=queue_name, name=f"restart{attempt}", concurrency=THREADS
        )
        try:
            assert _alive_and_answering(worker, redis_server), f"{worker.node} did not start"
            time.sleep(delay)
            # Down for a second, as a real restart is: the worker notices meanwhile.
            redis_server.restart(down_for=1.0)
            alive.append(_alive_and_answering(worker, redis_server))
            if not alive[-1]:
                continue
            for run in runs:  # the runs in flight through the restart end as usual
                run = wait_for(run, finished, timeout=90)
                assert (run.status, run.reward) == (Run.Status.COMPLETED, 1.0), run.error
            after = queued_run(alice)  # and the worker takes new work from the new Redis
            _send_runs(redis_server, [after], queue_name=queue_name)
            after = wait_for(after, finished, timeout=90)
            assert (after.status, after.reward) == (Run.Status.COMPLETED, 1.0), after.error
        finally:
            processes.stop(worker)
    assert alive == [True] * len(RESTART_DELAYS), f"alive after {alive.count(True)} of {len(alive)}"
