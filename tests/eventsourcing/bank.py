"""The worked example of docs/eventsourcing.md: a bank application with account aggregates,
and a process application that keeps a ledger of the bank's deposits."""

from __future__ import annotations

from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.domain import Aggregate, DomainEventProtocol, event
from eventsourcing.system import ProcessApplication, System


class Account(Aggregate):
    """A bank account."""

    class Opened(Aggregate.Created):
        owner: str

    class Deposited(Aggregate.Event):
        amount: int

    @event(Opened)
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.balance = 0

    @event(Deposited)
    def deposit(self, amount: int) -> None:
        self.balance += amount


class Bank(Application[UUID]):
    """Opens accounts and takes deposits."""

    def open_account(self, owner: str) -> UUID:
        account = Account(owner)
        self.save(account)
        return account.id

    def deposit(self, account_id: UUID, amount: int) -> None:
        account: Account = self.repository.get(account_id)
        account.deposit(amount)
        self.save(account)

    def balance(self, account_id: UUID) -> int:
        account: Account = self.repository.get(account_id)
        return account.balance


class Ledger(Aggregate):
    """The running total of the bank's deposits (one aggregate, with a fixed id)."""

    class Started(Aggregate.Created):
        pass

    class Recorded(Aggregate.Event):
        amount: int

    @staticmethod
    def create_id() -> UUID:
        return uuid5(NAMESPACE_URL, "https://example.com/ledger")

    @event(Started)
    def __init__(self) -> None:
        self.total = 0
        self.deposits = 0

    @event(Recorded)
    def record(self, amount: int) -> None:
        self.total += amount
        self.deposits += 1


class Statistics(ProcessApplication[UUID]):
    """Follows the bank: each deposit is recorded in the ledger, atomically with the
    position of the deposit in the bank's notification log (so exactly once)."""

    @singledispatchmethod
    def policy(
        self, domain_event: DomainEventProtocol[UUID], processing_event: ProcessingEvent[UUID]
    ) -> None:
        """Other events: nothing to do."""

    @policy.register
    def _(self, domain_event: Account.Deposited, processing_event: ProcessingEvent[UUID]) -> None:
        try:
            ledger: Ledger = self.repository.get(Ledger.create_id())
        except AggregateNotFoundError:
            ledger = Ledger()
        ledger.record(domain_event.amount)
        processing_event.collect_events(ledger)

    def ledger(self) -> tuple[int, int]:
        """The total of the deposits and how many there were."""
        ledger: Ledger = self.repository.get(Ledger.create_id())
        return ledger.total, ledger.deposits


system = System(pipes=[[Bank, Statistics]])
