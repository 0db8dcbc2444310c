"""Examples of the module's own: applications that keep their own data in the plane,
atomically with their events or their tracking records (``docs/eventsourcing.md``)."""
