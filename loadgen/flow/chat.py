"""Chat users: sessions arrive open-loop; turns inside a session are closed-loop with think time."""

from __future__ import annotations

from rushhour.loadgen import prompts
from rushhour.loadgen.datasets import Dialog, load_dataset
from rushhour.loadgen.flow.arrivals import open_loop
from rushhour.loadgen.flow.protocol import NS, Flow, Host, Logical, Spawn, Wait, counted, end_ns, wait_s
from rushhour.loadgen.flow.send import send_logical
from rushhour.loadgen.schedule import unit_work, worker_share, worker_slots
from rushhour.loadgen.workload import count_call
from rushhour.scenarios.model import ChatPersona


def run_chat(host: Host, persona: ChatPersona) -> Flow:
    """Arrival loop of one chat persona in this process (its share of the rate), or its closed loop."""
    if persona.concurrency is not None:
        yield from closed_loop(host, persona)
        return
    rng = host.rng(persona.name, host.worker_index, "arrivals")
    rate = worker_share(persona.arrival.rate, host.workers)
    slots = worker_slots(persona.max_concurrent_sessions, host.workers, host.worker_index)
    tenants = host.scenario.tier(persona.tier).tenant_ids
    system = host.text(f"system:{persona.name}", persona.system_prompt_tokens) if persona.system_prompt_tokens else ""
    if persona.dataset is not None:  # read once per process, before the first arrival
        load_dataset(persona.dataset.path, persona.dataset.format, persona.dataset.limit)
    active = [0]
    try:
        for instance, t in open_loop(host, rate, lambda: unit_work(persona.arrival, rng), persona.name):
            yield Wait(int(t * NS))
            if host.stopping:
                return
            if host.behind(persona.name, t):
                continue
            session_rng = host.rng(persona.name, host.worker_index, instance)
            tenant = session_rng.choice(tenants)
            intended_ns = int(t * NS)
            if active[0] >= slots:
                session_id = f"{persona.name}-w{host.worker_index}-{instance}"
                host.not_sent(Logical(persona.tier, tenant, persona.name, host.conversation(), 0, intended_ns,
                                      session_id=session_id))
                continue
            active[0] += 1
            yield Spawn(counted(session(host, persona, instance, tenant, system, intended_ns), active))
    finally:
        host.flush_shortfall(persona.name)


def closed_loop(host: Host, persona: ChatPersona) -> Flow:
    """``concurrency`` users (this process's share), each running sessions back to back until arrivals end: a
    session's first request is intended the moment the one before ended (there is no arrival to be late for)."""
    users = worker_slots(persona.concurrency or 1, host.workers, host.worker_index)
    tenants = host.scenario.tier(persona.tier).tenant_ids
    system = host.text(f"system:{persona.name}", persona.system_prompt_tokens) if persona.system_prompt_tokens else ""
    if persona.dataset is not None:
        load_dataset(persona.dataset.path, persona.dataset.format, persona.dataset.limit)
    for user in range(users):
        yield Spawn(_user(host, persona, user, users, tenants, system))


def _user(host: Host, persona: ChatPersona, user: int, users: int, tenants: list[str], system: object) -> Flow:
    """One closed-loop user: session after session; instances numbered apart per user (user + k × users, from 1)."""
    instance = user + 1
    while not host.stopping and host.now_ns() < end_ns(host):
        tenant = host.rng(persona.name, host.worker_index, instance).choice(tenants)
        yield from session(host, persona, instance, tenant, system, host.now_ns())
        instance += users


def _dialog(host: Host, persona: ChatPersona, instance: int) -> Dialog | None:
    """The session's conversation from the persona's dataset (its own seeded stream), or None."""
    spec = persona.dataset
    if spec is None:
        return None
    dialogs = load_dataset(spec.path, spec.format, spec.limit)
    return host.rng(persona.name, host.worker_index, instance, "dataset").choice(dialogs)


def session(host: Host, persona: ChatPersona, instance: int, tenant: str, system: object, intended_ns: int) -> Flow:
    """One chat session: its turns, think time between them, patience and re-asks; its task record."""
    dialog = _dialog(host, persona, instance)
    rng = host.rng(persona.name, host.worker_index, instance, "session")
    session_id = f"{persona.name}-w{host.worker_index}-{instance}"
    task = host.new_task(persona.name, persona.tier, tenant, session_id, host.now_ns(), session_id)
    spec = persona.dataset
    sized_by_dataset = spec is not None and spec.output_tokens == "dataset"
    if dialog is None:
        turns = persona.turns.sample_int(rng, lowest=1)
    else:  # the conversation's own turns; its system text after the persona's shared one (the common prefix)
        turns = min(len(dialog.turns), (spec.max_turns if spec else None) or len(dialog.turns))
        system = "\n\n".join(_str(part) for part in (system, dialog.system) if part)
    # patience draws from its own stream: adding it to a scenario leaves every other sample unchanged
    patience_rng = host.rng(persona.name, host.worker_index, instance, "patience")
    conv = host.conversation(system)
    outcome = "completed"
    try:
        for turn in range(turns):
            if turn > 0:
                think = persona.think_time_s.sample(rng)
                yield wait_s(host, think)
                if host.stopping or host.now_ns() >= end_ns(host):
                    outcome = "cancelled"  # the run ended before the user's next turn
                    break
                intended_ns = host.now_ns()
            said = dialog.turns[turn] if dialog is not None else None
            new_text = (host.text(f"{session_id}:u{turn}", persona.prompt_tokens.sample_int(rng, lowest=1))
                        if said is None else said.user)
            if said is not None and said.reply is not None and sized_by_dataset:
                max_tokens = prompts.count(said.reply)  # as long as the dataset's own answer
            else:
                max_tokens = persona.output_tokens.sample_int(rng, lowest=1)
            asks_left = persona.abandon_retries if persona.on_abandon == "retry" else 0
            while True:
                patience = persona.patience_s.sample(patience_rng) if persona.patience_s is not None else None
                req = Logical(persona.tier, tenant, persona.name, conv.with_user(new_text), max_tokens, intended_ns,
                              session_id=session_id, task_id=session_id, step=turn, patience_s=patience)
                record = yield from send_logical(host, req)
                # a user who gave up asks again (a new request, sent now) while re-asks are left
                if not record.abandoned or asks_left <= 0 or host.stopping or host.now_ns() >= end_ns(host):
                    break
                asks_left -= 1
                task.calls += 1
                task.calls_failed += 1
                task.first_failure = task.first_failure or "abandoned"
                intended_ns = host.now_ns()
            task.steps += 1
            if not count_call(task, record):
                outcome = "abandoned" if record.abandoned else "failed"
                break
            produced = record.output_tokens or record.tokens or max_tokens
            conv.append("user", new_text)
            if said is not None and said.reply is not None:  # the dataset's answer (multi-turn benchmarks do so)
                conv.append("assistant", said.reply)
            else:
                conv.append("assistant", host.text(f"{session_id}:a{turn}", produced))
    except GeneratorExit:
        outcome = "cancelled"
        raise
    except BaseException:  # the driver's cancel (the run's hard stop, a stopped user)
        outcome = "cancelled"
        raise
    finally:
        host.close_task(task, outcome)


def _str(part: object) -> str:
    """Text of a content part (a simulated piece has its text by reference)."""
    return part if isinstance(part, str) else part.text()  # type: ignore[attr-defined]
